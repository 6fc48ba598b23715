#include "chat/jinja_lexer.h"

#include <array>
#include <cerrno>
#include <cstdlib>

#include "chat/jinja_pystr.h"

namespace peregrine::chat::jinja {
namespace {

Status SyntaxError(int line, const char* reason) {
  return InvalidArgument("template syntax error at line " + std::to_string(line) + ": " + reason);
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Length of the whitespace code point at `pos`, or 0.
size_t SpaceAt(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t next = pos;
  uint32_t cp = DecodeUtf8(s, next);
  return IsPySpace(cp) ? next - pos : 0;
}

size_t SkipSpaces(std::string_view s, size_t pos) {
  while (size_t n = SpaceAt(s, pos)) pos += n;
  return pos;
}

bool AllSpace(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t n = SpaceAt(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

int CountLines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string NormalizeNewlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options) : src_(std::move(source)), options_(options) {}

  Result<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      size_t start = FindTagStart(pos_);
      if (start == std::string::npos) {
        Emit(Token::Type::kText, src_.substr(pos_));
        break;
      }
      PG_RETURN_IF_ERROR(LexTag(start));
    }
    Emit(Token::Type::kEof, "");
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  void Emit(Token::Type type, std::string text) {
    int lines = type == Token::Type::kText ? CountLines(text) : 0;
    tokens_.push_back(Token{type, std::move(text), line_});
    line_ += lines;
  }

  // Applies "-" or lstrip_blocks to the text before a tag and emits it.
  void EmitLeadingText(std::string text, char sign, bool is_variable) {
    if (sign == '-') {
      std::string stripped = PyStrip(text, nullptr, false, true);
      line_ += CountLines(std::string_view(text).substr(stripped.size()));
      text = std::move(stripped);
    } else if (sign != '+' && options_.lstrip_blocks && !is_variable) {
      size_t line_start = text.rfind('\n');
      line_start = line_start == std::string::npos ? 0 : line_start + 1;
      std::string_view tail = std::string_view(text).substr(line_start);
      if ((line_start > 0 || line_starting_) && !tail.empty() && AllSpace(tail)) text.resize(line_start);
    }
    if (!text.empty()) Emit(Token::Type::kText, std::move(text));
  }

  // After a tag end at `pos`: "-" eats all whitespace, otherwise trim_blocks eats one newline.
  size_t ConsumeTagSuffix(size_t pos, char sign) {
    if (sign == '-') return SkipSpaces(src_, pos);
    if (sign != '+' && options_.trim_blocks && pos < src_.size() && src_[pos] == '\n') return pos + 1;
    return pos;
  }

  void FinishTag(size_t begin, size_t end) {
    line_ += CountLines(std::string_view(src_).substr(begin, end - begin));
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  Status LexTag(size_t start) {
    char kind = src_[start + 1];
    char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
    std::string text = src_.substr(pos_, start - pos_);
    size_t body = start + 2 + (sign ? 1 : 0);
    if (kind == '%') {
      size_t raw_end = MatchRawBegin(body);
      if (raw_end != std::string::npos) {
        EmitLeadingText(std::move(text), sign, false);
        line_starting_ = src_[raw_end - 1] == '\n';
        return LexRaw(raw_end);
      }
    }
    EmitLeadingText(std::move(text), sign, kind == '{');
    line_starting_ = false;
    if (kind == '#') return LexComment(body);
    return LexExpressionTag(kind == '%', body);
  }

  // "raw" + optional spaces + end of tag; returns the position after the tag or npos.
  size_t MatchRawBegin(size_t pos) const {
    pos = SkipSpaces(src_, pos);
    if (src_.compare(pos, 3, "raw") != 0) return std::string::npos;
    pos = SkipSpaces(src_, pos + 3);
    if (src_.compare(pos, 3, "-%}") == 0) return SkipSpaces(src_, pos + 3);
    if (src_.compare(pos, 2, "%}") == 0) return pos + 2;
    return std::string::npos;
  }

  Status LexRaw(size_t content_start) {
    for (size_t p = src_.find("{%", content_start); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q = SkipSpaces(src_, q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = SkipSpaces(src_, q + 6);
      size_t end;
      if (src_.compare(q, 3, "+%}") == 0) {
        end = q + 3;
      } else if (src_.compare(q, 3, "-%}") == 0) {
        end = SkipSpaces(src_, q + 3);
      } else if (src_.compare(q, 2, "%}") == 0) {
        end = ConsumeTagSuffix(q + 2, 0);
      } else {
        continue;
      }
      EmitLeadingText(src_.substr(content_start, p - content_start), sign, false);
      FinishTag(p, end);
      return Status::Ok();
    }
    return SyntaxError(line_, "missing end of raw directive");
  }

  Status LexComment(size_t body) {
    size_t close = src_.find("#}", body);
    if (close == std::string::npos) return SyntaxError(line_, "missing end of comment tag");
    char sign = close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    FinishTag(body, ConsumeTagSuffix(close + 2, sign));
    return Status::Ok();
  }

  Status LexExpressionTag(bool is_block, size_t pos) {
    const size_t body_start = pos;
    Emit(is_block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "");
    std::vector<char> brackets;
    const char* close = is_block ? "%}" : "}}";
    while (true) {
      pos = SkipSpaces(src_, pos);
      if (pos >= src_.size()) return SyntaxError(line_, "unexpected end of template inside a tag");
      if (brackets.empty()) {
        size_t end = std::string::npos;
        if (src_.compare(pos, 2, close) == 0) {
          end = is_block ? ConsumeTagSuffix(pos + 2, 0) : pos + 2;
        } else if ((src_[pos] == '-' || (is_block && src_[pos] == '+')) && src_.compare(pos + 1, 2, close) == 0) {
          end = src_[pos] == '-' ? SkipSpaces(src_, pos + 3) : pos + 3;
        }
        if (end != std::string::npos) {
          Emit(is_block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "");
          FinishTag(body_start, end);
          return Status::Ok();
        }
      }
      PG_RETURN_IF_ERROR(LexToken(pos, brackets));
    }
  }

  Status LexToken(size_t& pos, std::vector<char>& brackets) {
    char c = src_[pos];
    if (IsDigit(c)) return LexNumber(pos);
    if (IsNameStart(c)) {
      size_t end = pos;
      while (end < src_.size() && IsNameChar(src_[end])) ++end;
      Emit(Token::Type::kName, src_.substr(pos, end - pos));
      pos = end;
      return Status::Ok();
    }
    if (c == '\'' || c == '"') return LexString(pos);
    static constexpr std::array<const char*, 6> kTwoChar = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwoChar) {
      if (src_.compare(pos, 2, op) == 0) {
        Emit(Token::Type::kOp, op);
        pos += 2;
        return Status::Ok();
      }
    }
    static constexpr std::string_view kOneChar = "+-/*%~[](){}=<>.:|,;";
    if (kOneChar.find(c) == std::string_view::npos) return SyntaxError(line_, "unexpected character");
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : (c == '[' ? ']' : '}'));
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty() || brackets.back() != c) return SyntaxError(line_, "unbalanced brackets");
      brackets.pop_back();
    }
    Emit(Token::Type::kOp, std::string(1, c));
    ++pos;
    return Status::Ok();
  }

  Status LexNumber(size_t& pos) {
    auto digits_run = [&](size_t p, auto is_digit) {
      size_t q = p;
      while (q < src_.size() && (is_digit(src_[q]) || (src_[q] == '_' && q > p && q + 1 < src_.size() &&
                                                        is_digit(src_[q + 1]))))
        ++q;
      return q;
    };
    auto dec = [](char ch) { return IsDigit(ch); };
    bool after_dot = pos > 0 && src_[pos - 1] == '.';
    size_t end = digits_run(pos, dec);
    size_t float_end = std::string::npos;
    if (!after_dot) {
      size_t q = end;
      if (q + 1 < src_.size() && src_[q] == '.' && IsDigit(src_[q + 1])) {
        q = digits_run(q + 1, dec);
        float_end = q;
      }
      if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < src_.size() && IsDigit(src_[r])) float_end = digits_run(r, dec);
      }
    }
    if (float_end != std::string::npos) {
      Emit(Token::Type::kFloat, Clean(pos, float_end));
      pos = float_end;
      return Status::Ok();
    }
    if (src_[pos] == '0' && pos + 1 < src_.size()) {
      char base = static_cast<char>(src_[pos + 1] | 0x20);
      auto hex = [](char ch) { return IsDigit(ch) || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f'); };
      size_t q = pos + 2;
      if (base == 'x' || base == 'o' || base == 'b') {
        while (q < src_.size() && (hex(src_[q]) || src_[q] == '_')) ++q;
        std::string digits;
        for (size_t i = pos + 2; i < q; ++i)
          if (src_[i] != '_') digits += src_[i];
        int radix = base == 'x' ? 16 : (base == 'o' ? 8 : 2);
        char* parse_end = nullptr;
        errno = 0;
        unsigned long long v = digits.empty() ? 0 : std::strtoull(digits.c_str(), &parse_end, radix);
        if (digits.empty() || *parse_end != '\0' || errno != 0 || v > 0x7fffffffffffffffULL)
          return SyntaxError(line_, "invalid integer literal");
        Emit(Token::Type::kInt, std::to_string(v));
        pos = q;
        return Status::Ok();
      }
    }
    Emit(Token::Type::kInt, Clean(pos, end));
    pos = end;
    return Status::Ok();
  }

  std::string Clean(size_t begin, size_t end) const {
    std::string out;
    for (size_t i = begin; i < end; ++i)
      if (src_[i] != '_') out += src_[i];
    return out;
  }

  Status LexString(size_t& pos) {
    char quote = src_[pos];
    std::string value;
    size_t i = pos + 1;
    while (i < src_.size() && src_[i] != quote) {
      if (src_[i] != '\\') {
        value += src_[i++];
        continue;
      }
      if (i + 1 >= src_.size()) break;
      PG_RETURN_IF_ERROR(DecodeEscape(i, value));
    }
    if (i >= src_.size()) return SyntaxError(line_, "unterminated string literal");
    Emit(Token::Type::kString, std::move(value));
    pos = i + 1;
    return Status::Ok();
  }

  // Python "unicode-escape" decoding of one escape at src_[i] == '\\'.
  Status DecodeEscape(size_t& i, std::string& value) {
    char e = src_[i + 1];
    auto hex_value = [&](size_t start, size_t count, uint32_t& out) {
      if (start + count > src_.size()) return false;
      out = 0;
      for (size_t k = 0; k < count; ++k) {
        char h = src_[start + k];
        int d = IsDigit(h) ? h - '0' : ((h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10 : -1);
        if (d < 0) return false;
        out = out * 16 + static_cast<uint32_t>(d);
      }
      return true;
    };
    static constexpr std::string_view kSimple = "\\'\"abfnrtv\n";
    static constexpr std::string_view kMapped = "\\'\"\a\b\f\n\r\t\v";
    if (size_t k = kSimple.find(e); k != std::string_view::npos) {
      if (e != '\n') value += kMapped[k];  // backslash-newline is a line continuation
      i += 2;
      return Status::Ok();
    }
    if (e >= '0' && e <= '7') {
      uint32_t cp = 0;
      size_t k = i + 1;
      for (int n = 0; n < 3 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++n, ++k)
        cp = cp * 8 + static_cast<uint32_t>(src_[k] - '0');
      AppendUtf8(cp, value);
      i = k;
      return Status::Ok();
    }
    size_t width = e == 'x' ? 2 : (e == 'u' ? 4 : (e == 'U' ? 8 : 0));
    if (width > 0) {
      uint32_t cp = 0;
      if (!hex_value(i + 2, width, cp) || cp > 0x10ffff) return SyntaxError(line_, "invalid escape in string literal");
      AppendUtf8(cp >= 0xd800 && cp <= 0xdfff ? 0xfffd : cp, value);
      i += 2 + width;
      return Status::Ok();
    }
    value += '\\';  // unknown escapes stay as written
    ++i;
    return Status::Ok();
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(NormalizeNewlines(source, options.keep_trailing_newline), options).Run();
}

}  // namespace peregrine::chat::jinja
