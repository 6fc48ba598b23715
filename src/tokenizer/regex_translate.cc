#include "tokenizer/regex_translate.h"

#include <array>
#include <cctype>
#include <cstdio>

#include "tokenizer/unicode_delta.h"

namespace peregrine::tokenizer {
namespace {

// Unicode White_Space, which is what Oniguruma's \s means for UTF-8 (PCRE2 adds U+180E).
constexpr std::string_view kWhiteSpaceItems =
    "\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

struct GeneralCategory {
  std::string_view short_name;  // "L", "Lu", ...
  std::string_view long_name;   // normalized: lower case, no separators
};

constexpr std::array<GeneralCategory, 38> kCategories = {{
    {"L", "letter"}, {"Lu", "uppercaseletter"}, {"Ll", "lowercaseletter"},
    {"Lt", "titlecaseletter"}, {"Lm", "modifierletter"}, {"Lo", "otherletter"},
    {"M", "mark"}, {"M", "combiningmark"}, {"Mn", "nonspacingmark"},
    {"Mc", "spacingmark"}, {"Me", "enclosingmark"}, {"N", "number"},
    {"Nd", "decimalnumber"}, {"Nl", "letternumber"}, {"No", "othernumber"},
    {"P", "punctuation"}, {"Pc", "connectorpunctuation"}, {"Pd", "dashpunctuation"},
    {"Ps", "openpunctuation"}, {"Pe", "closepunctuation"}, {"Pi", "initialpunctuation"},
    {"Pf", "finalpunctuation"}, {"Po", "otherpunctuation"}, {"S", "symbol"},
    {"Sm", "mathsymbol"}, {"Sc", "currencysymbol"}, {"Sk", "modifiersymbol"},
    {"So", "othersymbol"}, {"Z", "separator"}, {"Zs", "spaceseparator"},
    {"Zl", "lineseparator"}, {"Zp", "paragraphseparator"}, {"C", "other"},
    {"Cc", "control"}, {"Cf", "format"}, {"Co", "privateuse"}, {"Cn", "unassigned"},
    {"Cs", "surrogate"},
}};

// Oniguruma ignores case, spaces, hyphens and underscores in property names.
std::string NormalizePropertyName(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (c == ' ' || c == '-' || c == '_') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// The short name of a general category, or empty when `name` is some other property.
std::string_view FindGeneralCategory(std::string_view name) {
  const std::string normalized = NormalizePropertyName(name);
  for (const GeneralCategory& gc : kCategories) {
    if (normalized == gc.long_name || normalized == NormalizePropertyName(gc.short_name)) {
      return gc.short_name;
    }
  }
  return {};
}

void AppendCodePoint(char32_t cp, std::string& out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(cp));
  out += buf;
}

// Class items (no brackets) for the characters of category `gc` missing from PCRE2's tables.
void AppendDeltaItems(std::string_view gc, bool with_delta, std::string& out) {
  if (!with_delta) return;
  for (const UnicodeDeltaRange& r : UnicodeDeltaRanges()) {
    const bool matches = r.category[0] == gc[0] && (gc.size() == 1 || r.category[1] == gc[1]);
    if (!matches) continue;
    AppendCodePoint(r.first, out);
    if (r.last != r.first) {
      out.push_back('-');
      AppendCodePoint(r.last, out);
    }
  }
}

// Class items for a general category: the PCRE2 property plus the newer characters.
std::string CategoryItems(std::string_view gc, bool with_delta) {
  std::string out = "\\p{";
  out += gc;
  out += "}";
  AppendDeltaItems(gc, with_delta, out);
  return out;
}

// Oniguruma's \w for Unicode: Alphabetic, marks, decimal digits and connector punctuation
// (UTS #18 "word" without the joiners); below U+0100 its Latin-1 table also counts the
// superscript digits and vulgar fractions.
std::string WordItems(bool with_delta) {
  std::string out = "\\p{Alphabetic}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
  out += CategoryItems("M", with_delta);
  out += CategoryItems("Nd", with_delta);
  out += CategoryItems("Pc", with_delta);
  AppendDeltaItems("L", with_delta, out);
  AppendDeltaItems("Nl", with_delta, out);
  return out;
}

class Translator {
 public:
  Translator(std::string_view pattern, bool with_delta) : p_(pattern), with_delta_(with_delta) {}

  Result<std::string> Run() {
    while (i_ < p_.size()) {
      Status s = in_class_ ? StepInClass() : StepOutside();
      if (!s.ok()) return s;
    }
    if (in_class_) return InvalidArgument(Error("unterminated character class"));
    return std::move(out_);
  }

 private:
  std::string Error(std::string_view what) const {
    return "regex /" + std::string(p_) + "/ at offset " + std::to_string(i_) + ": " +
           std::string(what);
  }

  Status Unsupported(std::string_view what) const {
    return Unimplemented(Error(std::string(what) + " has no PCRE2 equivalent"));
  }

  // Parses \p{..} / \P{..} / \p{^..} at i_ (pointing at the backslash).
  Status ParseProperty(std::string* name, bool* negated) {
    *negated = p_[i_ + 1] == 'P';
    if (i_ + 2 >= p_.size() || p_[i_ + 2] != '{') {
      return Unsupported("single-letter property without braces");
    }
    const size_t close = p_.find('}', i_ + 3);
    if (close == std::string_view::npos) return InvalidArgument(Error("unterminated \\p{"));
    std::string_view body = p_.substr(i_ + 3, close - i_ - 3);
    if (!body.empty() && body[0] == '^') {
      *negated = !*negated;
      body.remove_prefix(1);
    }
    *name = std::string(body);
    i_ = close + 1;
    return Status::Ok();
  }

  Status StepOutside() {
    const char c = p_[i_];
    if (c == '[') {
      in_class_ = true;
      class_start_ = true;
      out_.push_back('[');
      ++i_;
      if (i_ < p_.size() && p_[i_] == '^') {
        out_.push_back('^');
        ++i_;
      }
      return Status::Ok();
    }
    if (c == '(' && i_ + 1 < p_.size() && p_[i_ + 1] == '?') return Group();
    if (c == '{' && i_ + 1 < p_.size() && p_[i_ + 1] == ',') {
      // Ruby's {,n} is {0,n}; PCRE2 10.42 would read it as literal text.
      size_t j = i_ + 2;
      while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j]))) ++j;
      if (j > i_ + 2 && j < p_.size() && p_[j] == '}') {
        out_ += "{0,";
        out_.append(p_.substr(i_ + 2, j - i_ - 1));
        i_ = j + 1;
        return Status::Ok();
      }
    }
    if (c != '\\') {
      out_.push_back(c);
      ++i_;
      return Status::Ok();
    }
    if (i_ + 1 >= p_.size()) return InvalidArgument(Error("trailing backslash"));
    const char e = p_[i_ + 1];
    switch (e) {
      case 'p':
      case 'P': {
        std::string name;
        bool negated = false;
        PG_RETURN_IF_ERROR(ParseProperty(&name, &negated));
        const std::string_view gc = FindGeneralCategory(name);
        if (gc.empty()) {
          out_ += negated ? "\\P{" : "\\p{";
          out_ += name;
          out_ += "}";
        } else {
          out_ += negated ? "[^" : "[";
          out_ += CategoryItems(gc, with_delta_);
          out_ += "]";
        }
        return Status::Ok();
      }
      case 's': case 'S':
        AppendClass(e == 'S', std::string(kWhiteSpaceItems));
        break;
      case 'd': case 'D':
        AppendClass(e == 'D', CategoryItems("Nd", with_delta_));
        break;
      case 'w': case 'W':
        AppendClass(e == 'W', WordItems(with_delta_));
        break;
      case 'h': case 'H':
        AppendClass(e == 'H', "0-9a-fA-F");
        break;
      default:
        return CommonEscape();
    }
    i_ += 2;
    return Status::Ok();
  }

  void AppendClass(bool negated, const std::string& items) {
    out_ += negated ? "[^" : "[";
    out_ += items;
    out_ += "]";
  }

  // Escapes whose translation is the same inside and outside a class.
  Status CommonEscape() {
    const char e = p_[i_ + 1];
    if (e == 'v') {  // Ruby: vertical tab; PCRE2: any vertical whitespace
      out_ += "\\x0B";
      i_ += 2;
      return Status::Ok();
    }
    if (e == 'u') {  // \uHHHH
      if (i_ + 6 > p_.size()) return InvalidArgument(Error("short \\u escape"));
      const std::string_view hex = p_.substr(i_ + 2, 4);
      for (const char h : hex) {
        if (!std::isxdigit(static_cast<unsigned char>(h))) {
          return InvalidArgument(Error("bad \\u escape"));
        }
      }
      out_ += "\\x{";
      out_ += hex;
      out_ += "}";
      i_ += 6;
      return Status::Ok();
    }
    // Everything else (\n, \t, \x.., \., \\, \A, \z, \b, \K, backreferences ...) reads the
    // same in both dialects. Copy the escape with a whole UTF-8 character after it.
    out_.push_back('\\');
    ++i_;
    size_t len = 1;
    const auto lead = static_cast<unsigned char>(p_[i_]);
    if (lead >= 0xC0) len = lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    out_.append(p_.substr(i_, len));
    i_ += len;
    return Status::Ok();
  }

  Status Group() {
    // At "(?".
    if (i_ + 2 >= p_.size()) return InvalidArgument(Error("unterminated group"));
    const char k = p_[i_ + 2];
    if (k == '~') return Unsupported("the absent operator (?~...)");
    const bool is_options = k == '-' || std::isalpha(static_cast<unsigned char>(k));
    if (!is_options) {
      out_ += "(?";
      i_ += 2;
      return Status::Ok();
    }
    // Option group: (?imx-imx) or (?imx-imx:...). Ruby's m is PCRE2's s.
    out_ += "(?";
    size_t j = i_ + 2;
    for (; j < p_.size() && p_[j] != ')' && p_[j] != ':'; ++j) {
      switch (p_[j]) {
        case 'i': case 'x': case '-':
          out_.push_back(p_[j]);
          break;
        case 'm':
          out_.push_back('s');
          break;
        default:
          i_ = j;
          return Unsupported(std::string("group option '") + p_[j] + "'");
      }
    }
    if (j >= p_.size()) return InvalidArgument(Error("unterminated group options"));
    out_.push_back(p_[j]);
    i_ = j + 1;
    return Status::Ok();
  }

  Status StepInClass() {
    const char c = p_[i_];
    const bool at_start = class_start_;
    class_start_ = false;
    if (c == ']' && !at_start) {
      in_class_ = false;
      out_.push_back(']');
      ++i_;
      return Status::Ok();
    }
    if (c == '[') {
      if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') return Unsupported("a POSIX bracket class");
      return Unsupported("a nested character class");
    }
    if (c == '&' && i_ + 1 < p_.size() && p_[i_ + 1] == '&') {
      return Unsupported("character class intersection (&&)");
    }
    if (c != '\\') {
      out_.push_back(c);
      ++i_;
      return Status::Ok();
    }
    if (i_ + 1 >= p_.size()) return InvalidArgument(Error("trailing backslash"));
    const char e = p_[i_ + 1];
    switch (e) {
      case 'p':
      case 'P': {
        std::string name;
        bool negated = false;
        PG_RETURN_IF_ERROR(ParseProperty(&name, &negated));
        const std::string_view gc = FindGeneralCategory(name);
        if (gc.empty()) {
          out_ += negated ? "\\P{" : "\\p{";
          out_ += name;
          out_ += "}";
        } else if (negated) {
          return Unsupported("a negated general category inside a class");
        } else {
          out_ += CategoryItems(gc, with_delta_);
        }
        return Status::Ok();
      }
      case 's':
        out_ += kWhiteSpaceItems;
        break;
      case 'd':
        out_ += CategoryItems("Nd", with_delta_);
        break;
      case 'w':
        out_ += WordItems(with_delta_);
        break;
      case 'h':
        out_ += "0-9a-fA-F";
        break;
      case 'S': case 'D': case 'W': case 'H':
        return Unsupported(std::string("\\") + e + " inside a class");
      default:
        return CommonEscape();
    }
    i_ += 2;
    return Status::Ok();
  }

  std::string_view p_;
  bool with_delta_;
  size_t i_ = 0;
  bool in_class_ = false;
  bool class_start_ = false;  // the next character is the first of a class body
  std::string out_;
};

}  // namespace

Result<std::string> TranslateOnigurumaPattern(std::string_view pattern, bool with_unicode_delta) {
  return Translator(pattern, with_unicode_delta).Run();
}

}  // namespace peregrine::tokenizer
