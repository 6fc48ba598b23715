#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/byte_level.h"

namespace peregrine::tokenizer {
namespace {

std::string Lossy(std::string_view bytes) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy(bytes, /*is_final=*/true, out), bytes.size());
  return out;
}

constexpr std::string_view kFffd = kReplacementCharacter;

std::string Repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(Utf8Test, ValidInputIsUnchanged) {
  for (std::string_view s : {"", "abc", "é", "中文", "😀", "\x7F", "\xF4\x8F\xBF\xBF", "a\0b"}) {
    EXPECT_TRUE(IsValidUtf8(s)) << testing::Printable(s);
    EXPECT_EQ(Lossy(s), s);
  }
}

TEST(Utf8Test, MaximalSubpartsBecomeOneReplacementEach) {
  struct Case {
    std::string_view in;
    std::string want;
  };
  const Case cases[] = {
      {"\x80", std::string(kFffd)},
      {"\xFF", std::string(kFffd)},
      {"\xC0\xAF", Repeat(kFffd, 2)},          // overlong lead byte, then a stray continuation
      {"\xE0\x80\xAF", Repeat(kFffd, 3)},      // E0 needs A0..BF next
      {"\xED\xA0\x80", Repeat(kFffd, 3)},      // UTF-8-encoded lone surrogate
      {"\xF0\x9F\x98", std::string(kFffd)},    // truncated at the end: one subpart
      {"\xF0\x9F\x98" "A", "\xEF\xBF\xBD" "A"},
      {"\xF4\x90\x80\x80", Repeat(kFffd, 4)},  // above U+10FFFF
      {"\xF8\x88\x80\x80\x80", Repeat(kFffd, 5)},
      {"\xC3\x28", "\xEF\xBF\xBD" "("},
      {"\xE2\x28\xA1", "\xEF\xBF\xBD" "(" "\xEF\xBF\xBD"},
      {"a\xE4\xB8", "a" "\xEF\xBF\xBD"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(IsValidUtf8(c.in)) << testing::Printable(c.in);
    EXPECT_EQ(Lossy(c.in), c.want) << testing::Printable(c.in);
  }
}

TEST(Utf8Test, NonFinalKeepsAnIncompleteTail) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("ab\xE4\xB8", /*is_final=*/false, out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  // A tail that can no longer become valid is replaced at once.
  EXPECT_EQ(AppendUtf8Lossy("\xE4\x41", /*is_final=*/false, out), 2u);
  EXPECT_EQ(out, std::string(kFffd) + "A");
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("\xF0\x9F\x98\x80", /*is_final=*/false, out), 4u);
  EXPECT_EQ(out, "😀");
}

TEST(Utf8Test, WhiteSpaceHelpers) {
  EXPECT_EQ(LeadingWhiteSpaceEnd(" \t\u3000x "), 5u);
  EXPECT_EQ(TrailingWhiteSpaceBegin(" x\u00A0\n"), 2u);
  EXPECT_EQ(LeadingWhiteSpaceEnd("   "), 3u);
  EXPECT_EQ(TrailingWhiteSpaceBegin("   "), 0u);
  EXPECT_FALSE(IsUnicodeWhiteSpace(0x180E));  // no longer White_Space since Unicode 6.3
  EXPECT_FALSE(IsUnicodeWhiteSpace(0x200B));
  EXPECT_TRUE(IsUnicodeWhiteSpace(0x85));
}

TEST(Utf8Test, ByteLevelAlphabetIsABijection) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string mapped = BytesToByteLevel(all);
  EXPECT_TRUE(IsValidUtf8(mapped));
  EXPECT_EQ(ByteLevelToBytes(mapped), all);
  EXPECT_EQ(ByteLevelCodePoint(' '), U'\u0120');  // "Ġ"
  EXPECT_EQ(ByteLevelCodePoint('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(ByteLevelCodePoint('A'), U'A');
  EXPECT_EQ(ByteLevelToBytes("<think>"), "<think>");
  EXPECT_FALSE(ByteLevelToBytes("<｜User｜>").has_value());  // U+FF5C is not in the alphabet
}

// Python's decode(errors="replace") is the reference for the repair rule.
TEST(Utf8Test, RepairMatchesPythonOnRandomBytes) {
  std::mt19937 rng(1234);
  const uint8_t interesting[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1,
                                 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3,
                                 0xF4, 0xF5, 0xF8, 0xFE, 0xFF};
  std::vector<std::string> docs;
  for (int i = 0; i < 3000; ++i) {
    std::string d;
    const int n = static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) {
      d.push_back(static_cast<char>(rng() % 2 ? interesting[rng() % sizeof(interesting)] : rng() % 256));
    }
    docs.push_back(d);
  }
  const auto dir = testing::WorkDir();
  ASSERT_TRUE(testing::WriteDocs(dir / "utf8_in.bin", docs).ok());
  const std::string script =
      "import struct,sys\n"
      "d=open(sys.argv[1],'rb').read();o=open(sys.argv[2],'wb');p=0\n"
      "while p<len(d):\n"
      " n=struct.unpack_from('<I',d,p)[0];p+=4;t=d[p:p+n].decode('utf-8','replace').encode();p+=n\n"
      " o.write(struct.pack('<I',len(t))+t)\n";
  const auto run = testing::RunCommand(testing::ShellQuote(testing::PythonPath()) + " -c " +
                                       testing::ShellQuote(script) + " " +
                                       testing::ShellQuote((dir / "utf8_in.bin").string()) + " " +
                                       testing::ShellQuote((dir / "utf8_out.bin").string()));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const auto want = testing::ReadDocs(dir / "utf8_out.bin");
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_EQ(want->size(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    ASSERT_EQ(Lossy(docs[i]), (*want)[i]) << "input " << testing::Printable(docs[i]);
  }
}

}  // namespace
}  // namespace peregrine::tokenizer
