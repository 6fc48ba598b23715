// Builtin filters of the Jinja subset, with jinja2's semantics (and Hugging Face's tojson).
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <cerrno>

#include "chat/jinja_builtins.h"
#include "chat/jinja_json.h"
#include "chat/jinja_pystr.h"

namespace peregrine::chat::jinja {
namespace {

Status FilterError(const char* what) { return InvalidArgument(std::string("template error: ") + what); }

Result<Value> StringResult(Interpreter& in, std::string s) {
  PG_RETURN_IF_ERROR(in.CheckSize(s.size()));
  PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(s.size() / 64)));
  return Value::String(std::move(s));
}

Value MakeList(std::vector<Value> items, bool is_tuple = false) {
  auto list = std::make_shared<List>();
  list->items = std::move(items);
  list->is_tuple = is_tuple;
  return Value::FromList(std::move(list));
}

Value MakeGenerator(std::vector<Value> items) {
  auto list = std::make_shared<List>();
  list->items = std::move(items);
  list->is_generator = true;
  return Value::FromList(std::move(list));
}

// jinja2's attribute getter for filters: "a.b.0" walks items, then attributes.
Result<Value> Attribute(Interpreter& in, const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_undefined()) return Value();
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    Value key = numeric ? Value::Int(std::strtoll(part.c_str(), nullptr, 10)) : Value::String(part);
    PG_ASSIGN_OR_RETURN(current, GetItem(in, current, key));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return current;
}

Result<std::string> Str(const Value& v) { return ToPyStr(v); }

// Ordering key used by sort/min/max/unique: strings compare case-insensitively unless asked.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(AsciiLower(v.as_string()));
  return v;
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t pos = 0;
  size_t line_start = 0;
  while (pos < s.size()) {
    size_t cp_start = pos;
    uint32_t cp = DecodeUtf8(s, pos);
    bool is_break = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d ||
                    cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!is_break) continue;
    lines.push_back(s.substr(line_start, cp_start - line_start));
    if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    line_start = pos;
  }
  if (line_start < s.size()) lines.push_back(s.substr(line_start));
  return lines;
}

Result<Value> Indent(Interpreter& in, const Value& input, const CallArgs& args) {
  if (!input.is_string()) return FilterError("indent needs a string");
  std::string s = input.as_string();
  Value width = args.Get(0, "width");
  std::string pad;
  if (width.is_string()) pad = width.as_string();
  else pad.assign(width.is_undefined() ? 4 : static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1024)), ' ');
  bool first = Truthy(args.Get(1, "first"));
  bool blank = Truthy(args.Get(2, "blank"));
  s += "\n";
  std::vector<std::string> lines = SplitLines(s);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out.push_back('\n');
      if (blank || !lines[i].empty()) out.append(pad);
    }
    out.append(lines[i]);
  }
  if (first) out = pad + out;
  return StringResult(in, std::move(out));
}

Result<Value> ToJsonFilter(Interpreter& in, const Value& input, const CallArgs& args) {
  PyJsonOptions options;
  options.ensure_ascii = Truthy(args.Get(0, "ensure_ascii"));
  Value indent = args.Get(1, "indent");
  if (indent.kind() == Value::Kind::kInt) options.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  else if (!indent.is_none() && !indent.is_undefined()) return FilterError("tojson indent must be an integer");
  Value separators = args.Get(2, "separators");
  if (separators.is_list() && separators.as_list().items.size() == 2 && separators.as_list().items[0].is_string() &&
      separators.as_list().items[1].is_string()) {
    options.has_separators = true;
    options.item_separator = separators.as_list().items[0].as_string();
    options.key_separator = separators.as_list().items[1].as_string();
  } else if (!separators.is_none() && !separators.is_undefined()) {
    return FilterError("tojson separators must be a pair of strings");
  }
  options.sort_keys = Truthy(args.Get(3, "sort_keys"));
  PG_ASSIGN_OR_RETURN(nlohmann::ordered_json json, ToJson(input));
  PG_ASSIGN_OR_RETURN(std::string text, PyJsonDumps(json, options));
  return StringResult(in, std::move(text));
}

Result<Value> Join(Interpreter& in, const Value& input, const CallArgs& args) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  Value sep = args.Get(0, "d");
  Value attribute = args.Get(1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0 && sep.is_string()) out += sep.as_string();
    Value item = items[i];
    if (attribute.is_string()) {
      PG_ASSIGN_OR_RETURN(item, Attribute(in, item, attribute.as_string()));
    }
    PG_ASSIGN_OR_RETURN(std::string s, Str(item));
    out += s;
    PG_RETURN_IF_ERROR(in.CheckSize(out.size()));
  }
  return StringResult(in, std::move(out));
}

// select/reject/selectattr/rejectattr: `args` from `first` on name a test and its arguments.
Result<Value> SelectItems(Interpreter& in, const Value& input, const CallArgs& args, bool by_attribute, bool keep) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string()) return FilterError("selectattr needs an attribute");
    attribute = args.positional[0].as_string();
    next = 1;
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string()) return FilterError("test name must be a string");
    test = args.positional[next].as_string();
    ++next;
  }
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
  std::vector<Value> out;
  for (const Value& item : items) {
    PG_RETURN_IF_ERROR(in.Tick());
    Value subject = item;
    if (by_attribute) {
      PG_ASSIGN_OR_RETURN(subject, Attribute(in, item, attribute));
    }
    bool passed = false;
    if (test.empty()) {
      passed = Truthy(subject);
    } else {
      PG_ASSIGN_OR_RETURN(passed, ApplyTest(in, test, subject, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return MakeGenerator(std::move(out));
}

Result<Value> Map(Interpreter& in, const Value& input, const CallArgs& args) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  std::vector<Value> out;
  Value attribute = args.Get(99, "attribute");
  if (attribute.is_string()) {
    Value fallback = args.Get(99, "default");
    for (const Value& item : items) {
      PG_RETURN_IF_ERROR(in.Tick());
      PG_ASSIGN_OR_RETURN(Value v, Attribute(in, item, attribute.as_string()));
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return MakeGenerator(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) return FilterError("map needs a filter name or attribute");
  CallArgs filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keyword = args.keyword;
  for (const Value& item : items) {
    PG_RETURN_IF_ERROR(in.Tick());
    PG_ASSIGN_OR_RETURN(Value v, ApplyFilter(in, args.positional[0].as_string(), item, filter_args));
    out.push_back(std::move(v));
  }
  return MakeGenerator(std::move(out));
}

Result<Value> Sort(Interpreter& in, const Value& input, const CallArgs& args) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  bool reverse = Truthy(args.Get(0, "reverse"));
  bool case_sensitive = Truthy(args.Get(1, "case_sensitive"));
  Value attribute = args.Get(2, "attribute");
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value key = item;
    if (attribute.is_string()) {
      PG_ASSIGN_OR_RETURN(key, Attribute(in, item, attribute.as_string()));
    }
    keyed.emplace_back(SortKey(key, case_sensitive), item);
  }
  auto n = static_cast<int64_t>(keyed.size());
  PG_RETURN_IF_ERROR(in.Tick(n * (1 + static_cast<int64_t>(std::log2(static_cast<double>(n) + 1)))));
  Status status;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (!status.ok()) return false;
    int64_t work = 0;
    Result<int> c = reverse ? PyCompare(b.first, a.first, &work) : PyCompare(a.first, b.first, &work);
    if (c.ok()) {
      Status charged = in.Tick(work);
      if (!charged.ok()) c = charged;
    }
    if (!c.ok()) {
      status = c.status();
      return false;
    }
    return *c < 0;
  });
  PG_RETURN_IF_ERROR(status);
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return MakeList(std::move(out));
}

Result<Value> MinMax(Interpreter& in, const Value& input, const CallArgs& args, bool want_max) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  bool case_sensitive = Truthy(args.Get(0, "case_sensitive"));
  Value attribute = args.Get(1, "attribute");
  Value best;
  Value best_key;
  for (const Value& item : items) {
    Value key = item;
    if (attribute.is_string()) {
      PG_ASSIGN_OR_RETURN(key, Attribute(in, item, attribute.as_string()));
    }
    key = SortKey(key, case_sensitive);
    if (best.is_undefined()) {
      best = item;
      best_key = key;
      continue;
    }
    int64_t work = 0;
    PG_ASSIGN_OR_RETURN(int c, PyCompare(key, best_key, &work));
    PG_RETURN_IF_ERROR(in.Tick(work));
    if (want_max ? c > 0 : c < 0) {
      best = item;
      best_key = key;
    }
  }
  return best;
}

Result<Value> Unique(Interpreter& in, const Value& input, const CallArgs& args) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  bool case_sensitive = Truthy(args.Get(0, "case_sensitive"));
  std::vector<Value> seen;
  std::vector<Value> out;
  PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(items.size() * items.size() / 16)));
  for (const Value& item : items) {
    Value key = SortKey(item, case_sensitive);
    int64_t work = 0;
    bool duplicate = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return PyEquals(s, key, &work); });
    PG_RETURN_IF_ERROR(in.Tick(work));
    if (duplicate) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return MakeList(std::move(out));
}

Result<Value> Replace(Interpreter& in, const Value& input, const CallArgs& args) {
  PG_ASSIGN_OR_RETURN(std::string s, Str(input));
  Value old_v = args.Get(0, "old");
  Value new_v = args.Get(1, "new");
  Value count_v = args.Get(2, "count");
  if (!old_v.is_string() || !new_v.is_string()) return FilterError("replace needs two strings");
  int64_t count = count_v.is_number() ? count_v.as_int() : -1;
  return CallMethod(in, Value::String(std::move(s)), "replace",
                    CallArgs{{old_v, new_v, Value::Int(count)}, {}});
}

Result<Value> Round(const Value& input, const CallArgs& args) {
  if (!input.is_number()) return FilterError("round needs a number");
  Value method_arg = args.Get(1, "method");
  bool common = !method_arg.is_string() || method_arg.as_string() == "common";
  if (common && input.kind() != Value::Kind::kFloat) return Value::Int(input.as_int());  // round(int) is an int
  int64_t precision = args.Get(0, "precision").is_number() ? args.Get(0, "precision").as_int() : 0;
  Value method = args.Get(1, "method");
  std::string how = method.is_string() ? method.as_string() : "common";
  double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
  double x = input.as_float() * scale;
  double r;
  if (how == "common") {
    std::fesetround(FE_TONEAREST);
    r = std::nearbyint(x);
  } else if (how == "floor") {
    r = std::floor(x);
  } else if (how == "ceil") {
    r = std::ceil(x);
  } else {
    return FilterError("round method must be common, ceil or floor");
  }
  return Value::Float(r / scale);
}

Result<Value> ToInt(const Value& input, const CallArgs& args) {
  if (input.is_undefined()) return FilterError("undefined value converted to a number");
  Value fallback = args.Get(0, "default");
  if (fallback.is_undefined()) fallback = Value::Int(0);
  if (input.kind() == Value::Kind::kInt || input.kind() == Value::Kind::kBool) return Value::Int(input.as_int());
  if (input.kind() == Value::Kind::kFloat) {
    double f = input.as_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(f));
  }
  if (input.is_string()) {
    std::string s = PyStrip(input.as_string(), nullptr, true, true);
    std::string digits;
    for (char c : s)
      if (c != '_') digits += c;
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(digits.c_str(), &end, 10);
    if (!digits.empty() && *end == '\0' && errno == 0) return Value::Int(v);
    double f = std::strtod(digits.c_str(), &end);
    if (!digits.empty() && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18)
      return Value::Int(static_cast<int64_t>(f));
  }
  return fallback;
}

Result<Value> ToFloat(const Value& input, const CallArgs& args) {
  if (input.is_undefined()) return FilterError("undefined value converted to a number");
  Value fallback = args.Get(0, "default");
  if (fallback.is_undefined()) fallback = Value::Float(0.0);
  if (input.is_number()) return Value::Float(input.as_float());
  if (input.is_string()) {
    std::string s = PyStrip(input.as_string(), nullptr, true, true);
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::Float(f);
  }
  return fallback;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::string out = AsciiLower(s);
  if (!out.empty()) out[0] = AsciiUpper(out.substr(0, 1))[0];
  return out;
}

// jinja2's title: words start after runs of whitespace, "-", "(", "{", "[" or "<".
std::string Title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    bool separator = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '-' ||
                     c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      out += c;
      word_start = true;
    } else {
      out += word_start ? AsciiUpper(std::string(1, c))[0] : AsciiLower(std::string(1, c))[0];
      word_start = false;
    }
  }
  return out;
}

Result<Value> Length(const Value& input) {
  if (input.is_string()) return Value::Int(static_cast<int64_t>(CountCodePoints(input.as_string())));
  if (input.is_list() && input.as_list().is_generator) return FilterError("generator has no length");
  if (input.is_list()) return Value::Int(static_cast<int64_t>(input.as_list().items.size()));
  if (input.is_dict()) return Value::Int(static_cast<int64_t>(input.as_dict().items.size()));
  if (input.is_undefined()) return Value::Int(0);
  return FilterError("value has no length");
}

Result<Value> FirstOrLast(Interpreter& in, const Value& input, bool first) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  if (items.empty()) return Value();
  return first ? items.front() : items.back();
}

Result<Value> Items(Interpreter& in, const Value& input) {
  if (input.is_undefined()) return MakeList({});
  PG_RETURN_IF_ERROR(in.Tick(WorkOf(input)));
  if (!input.is_dict()) return FilterError("items needs a mapping");
  std::vector<Value> out;
  for (const auto& [key, value] : input.as_dict().items) out.push_back(MakeList({Value::String(key), value}, true));
  return MakeList(std::move(out));
}

Result<Value> Sum(Interpreter& in, const Value& input, const CallArgs& args) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  Value attribute = args.Get(0, "attribute");
  Value total = args.Get(1, "start");
  if (total.is_undefined()) total = Value::Int(0);
  for (const Value& item : items) {
    Value v = item;
    if (attribute.is_string()) {
      PG_ASSIGN_OR_RETURN(v, Attribute(in, item, attribute.as_string()));
    }
    PG_ASSIGN_OR_RETURN(total, BinaryOp(in, "+", total, v));
  }
  return total;
}

Result<Value> Reverse(Interpreter& in, const Value& input) {
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
  std::reverse(items.begin(), items.end());
  if (!input.is_string()) return MakeList(std::move(items));
  std::string out;
  for (const Value& v : items) out += v.as_string();
  return Value::String(std::move(out));
}


}  // namespace


Result<Value> ApplyFilter(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args) {
  // String work is proportional to length; container work is charged where items are visited.
  int64_t cost = 1 + (input.is_string() ? WorkOf(input) : 0);
  for (const Value& arg : args.positional) cost += arg.is_string() ? WorkOf(arg) : 0;
  PG_RETURN_IF_ERROR(in.Tick(cost));
  if (name == "length" || name == "count") return Length(input);
  if (name == "default" || name == "d") {
    bool boolean = Truthy(args.Get(1, "boolean"));
    bool use_default = boolean ? !Truthy(input) : input.is_undefined();
    if (!use_default) return input;
    Value fallback = args.Get(0, "default_value");
    return fallback.is_undefined() ? Value::String("") : fallback;
  }
  if (name == "tojson") return ToJsonFilter(in, input, args);
  if (name == "string") {
    PG_ASSIGN_OR_RETURN(std::string s, Str(input));
    return StringResult(in, std::move(s));
  }
  if (name == "safe") return input;
  if (name == "trim") {
    PG_ASSIGN_OR_RETURN(std::string s, Str(input));
    Value chars = args.Get(0, "chars");
    std::string chars_text = chars.is_string() ? chars.as_string() : "";
    return Value::String(PyStrip(s, chars.is_string() ? &chars_text : nullptr, true, true));
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title" || name == "escape" ||
      name == "e") {
    PG_ASSIGN_OR_RETURN(std::string s, Str(input));
    if (name == "lower") return Value::String(AsciiLower(s));
    if (name == "upper") return Value::String(AsciiUpper(s));
    if (name == "capitalize") return Value::String(Capitalize(s));
    if (name == "title") return Value::String(Title(s));
    return StringResult(in, HtmlEscape(s));
  }
  if (name == "replace") return Replace(in, input, args);
  if (name == "join") return Join(in, input, args);
  if (name == "first" || name == "last") return FirstOrLast(in, input, name == "first");
  if (name == "items") return Items(in, input);
  if (name == "list") {
    PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, input));
    return MakeList(std::move(items));
  }
  if (name == "select") return SelectItems(in, input, args, false, true);
  if (name == "reject") return SelectItems(in, input, args, false, false);
  if (name == "selectattr") return SelectItems(in, input, args, true, true);
  if (name == "rejectattr") return SelectItems(in, input, args, true, false);
  if (name == "map") return Map(in, input, args);
  if (name == "sort") return Sort(in, input, args);
  if (name == "unique") return Unique(in, input, args);
  if (name == "min" || name == "max") return MinMax(in, input, args, name == "max");
  if (name == "sum") return Sum(in, input, args);
  if (name == "reverse") return Reverse(in, input);
  if (name == "indent") return Indent(in, input, args);
  if (name == "int") return ToInt(input, args);
  if (name == "float") return ToFloat(input, args);
  if (name == "round") return Round(input, args);
  if (name == "abs") {
    if (!input.is_number()) return FilterError("abs needs a number");
    if (input.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(input.as_float()));
    if (input.as_int() == std::numeric_limits<int64_t>::min()) return FilterError("integer overflow");
    return Value::Int(std::llabs(input.as_int()));
  }
  if (name == "wordcount") {
    PG_ASSIGN_OR_RETURN(std::string s, Str(input));
    int64_t words = 0;
    bool in_word = false;
    for (char c : s) {
      bool word_char = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                       (static_cast<unsigned char>(c) >= 0x80);
      if (word_char && !in_word) ++words;
      in_word = word_char;
    }
    return Value::Int(words);
  }
  return FilterError("unknown filter");
}

}  // namespace peregrine::chat::jinja
