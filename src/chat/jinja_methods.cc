// Builtin tests, the whitelisted str/dict methods and the global functions of the Jinja subset.
#include <array>
#include <ctime>

#include "chat/jinja_builtins.h"
#include "chat/jinja_pystr.h"

namespace peregrine::chat::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses larger ranges too

Status MethodError(const char* what) { return InvalidArgument(std::string("template error: ") + what); }

Value MakeList(std::vector<Value> items) {
  auto list = std::make_shared<List>();
  list->items = std::move(items);
  return Value::FromList(std::move(list));
}

constexpr std::array<std::string_view, 22> kStringMethods = {
    "startswith", "endswith", "split",   "rsplit",  "strip",   "lstrip",  "rstrip",     "lower",
    "upper",      "title",    "capitalize", "replace", "find", "rfind",   "count",      "join",
    "isdigit",    "isalpha",  "isalnum", "isspace", "islower", "isupper"};
constexpr std::array<std::string_view, 4> kDictMethods = {"items", "keys", "values", "get"};

// str.split / str.rsplit.
Result<Value> Split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    // Runs of whitespace separate; leading/trailing whitespace is ignored.
    std::vector<size_t> offsets = CodePointOffsets(s);
    size_t n = offsets.size() - 1;
    auto is_space = [&](size_t i) {
      size_t p = offsets[i];
      return IsPySpace(DecodeUtf8(s, p));
    };
    std::vector<std::pair<size_t, size_t>> words;  // code-point ranges
    for (size_t i = 0; i < n;) {
      while (i < n && is_space(i)) ++i;
      if (i >= n) break;
      size_t start = i;
      while (i < n && !is_space(i)) ++i;
      words.emplace_back(start, i);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      if (!from_right) {
        auto k = static_cast<size_t>(maxsplit);
        size_t tail_start = words[k].first;
        size_t tail_end = n;
        while (tail_end > tail_start && is_space(tail_end - 1)) --tail_end;
        words.resize(k);
        words.emplace_back(tail_start, tail_end);
      } else {
        size_t keep = static_cast<size_t>(maxsplit);
        size_t head_end = words[words.size() - keep - 1].second;
        size_t head_start = 0;
        while (head_start < head_end && is_space(head_start)) ++head_start;
        std::vector<std::pair<size_t, size_t>> tail(words.end() - static_cast<std::ptrdiff_t>(keep), words.end());
        words.clear();
        words.emplace_back(head_start, head_end);
        words.insert(words.end(), tail.begin(), tail.end());
      }
    }
    for (auto [a, b] : words) parts.push_back(s.substr(offsets[a], offsets[b] - offsets[a]));
  } else {
    if (!sep.is_string()) return MethodError("split separator must be a string");
    const std::string& d = sep.as_string();
    if (d.empty()) return MethodError("empty separator");
    std::vector<size_t> hits;
    for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, p + d.size())) hits.push_back(p);
    if (maxsplit >= 0 && static_cast<int64_t>(hits.size()) > maxsplit) {
      auto k = static_cast<size_t>(maxsplit);
      if (from_right) hits.erase(hits.begin(), hits.end() - static_cast<std::ptrdiff_t>(k));
      else hits.resize(k);
    }
    size_t start = 0;
    for (size_t h : hits) {
      parts.push_back(s.substr(start, h - start));
      start = h + d.size();
    }
    parts.push_back(s.substr(start));
  }
  std::vector<Value> out;
  for (std::string& p : parts) out.push_back(Value::String(std::move(p)));
  return MakeList(std::move(out));
}

Result<Value> ReplaceText(Interpreter& in, const std::string& s, const std::string& old_text,
                          const std::string& new_text, int64_t count) {
  std::string out;
  int64_t done = 0;
  auto limit_reached = [&] { return count >= 0 && done >= count; };
  if (old_text.empty()) {
    std::vector<size_t> offsets = CodePointOffsets(s);
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (!limit_reached()) {
        out += new_text;
        ++done;
      }
      out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
      PG_RETURN_IF_ERROR(in.CheckSize(out.size()));
    }
    if (!limit_reached()) out += new_text;
  } else {
    size_t start = 0;
    for (size_t p = s.find(old_text); p != std::string::npos && !limit_reached(); p = s.find(old_text, start)) {
      out.append(s, start, p - start);
      out += new_text;
      start = p + old_text.size();
      ++done;
      PG_RETURN_IF_ERROR(in.CheckSize(out.size()));
    }
    out.append(s, start, std::string::npos);
  }
  PG_RETURN_IF_ERROR(in.CheckSize(out.size()));
  PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(out.size() / 64)));
  return Value::String(std::move(out));
}

Result<bool> AffixTest(const std::string& s, const Value& arg, bool prefix) {
  auto matches = [&](const Value& v) -> Result<bool> {
    if (!v.is_string()) return MethodError("startswith/endswith need strings");
    const std::string& a = v.as_string();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.is_list()) {
    for (const Value& v : arg.as_list().items) {
      PG_ASSIGN_OR_RETURN(bool m, matches(v));
      if (m) return true;
    }
    return false;
  }
  return matches(arg);
}

template <typename Pred>
bool AllCodePoints(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  size_t pos = 0;
  while (pos < s.size())
    if (!pred(DecodeUtf8(s, pos))) return false;
  return true;
}

Result<Value> StringMethod(Interpreter& in, const std::string& s, std::string_view name, const CallArgs& args) {
  Value a0 = args.Get(0, "");
  if (name == "startswith" || name == "endswith") {
    PG_ASSIGN_OR_RETURN(bool m, AffixTest(s, a0, name == "startswith"));
    return Value::Bool(m);
  }
  if (name == "split" || name == "rsplit") {
    Value sep = args.Get(0, "sep");
    Value maxsplit = args.Get(1, "maxsplit");
    return Split(s, sep, maxsplit.is_number() ? maxsplit.as_int() : -1, name == "rsplit");
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    if (!a0.is_none() && !a0.is_undefined() && !a0.is_string()) return MethodError("strip needs a string");
    std::string chars = a0.is_string() ? a0.as_string() : "";
    return Value::String(PyStrip(s, a0.is_string() ? &chars : nullptr, name != "rstrip", name != "lstrip"));
  }
  if (name == "lower") return Value::String(AsciiLower(s));
  if (name == "upper") return Value::String(AsciiUpper(s));
  if (name == "capitalize") {
    CallArgs none;
    return ApplyFilter(in, name, Value::String(s), none);
  }
  if (name == "title") {  // Python's str.title: a letter after a non-letter starts a word
    std::string out = s;
    bool previous_cased = false;
    for (char& c : out) {
      bool lower = c >= 'a' && c <= 'z';
      bool upper = c >= 'A' && c <= 'Z';
      if (lower && !previous_cased) c = static_cast<char>(c - 'a' + 'A');
      else if (upper && previous_cased) c = static_cast<char>(c - 'A' + 'a');
      previous_cased = lower || upper;
    }
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    Value old_v = args.Get(0, "old");
    Value new_v = args.Get(1, "new");
    Value count = args.Get(2, "count");
    if (!old_v.is_string() || !new_v.is_string()) return MethodError("replace needs two strings");
    return ReplaceText(in, s, old_v.as_string(), new_v.as_string(), count.is_number() ? count.as_int() : -1);
  }
  if (name == "find" || name == "rfind" || name == "count") {
    if (!a0.is_string()) return MethodError("find/count need a string");
    const std::string& sub = a0.as_string();
    if (name == "count") {
      if (sub.empty()) return Value::Int(static_cast<int64_t>(CountCodePoints(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::Int(n);
    }
    size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) return Value::Int(-1);
    return Value::Int(static_cast<int64_t>(CountCodePoints(std::string_view(s).substr(0, p))));
  }
  if (name == "join") {
    PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(in, a0));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return MethodError("join needs strings");
      if (i > 0) out += s;
      out += items[i].as_string();
      PG_RETURN_IF_ERROR(in.CheckSize(out.size()));
    }
    return Value::String(std::move(out));
  }
  if (name == "isdigit") return Value::Bool(AllCodePoints(s, [](uint32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value::Bool(AllCodePoints(s, [](uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }));
  if (name == "isalnum")
    return Value::Bool(AllCodePoints(
        s, [](uint32_t c) { return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9'); }));
  if (name == "isspace") return Value::Bool(AllCodePoints(s, IsPySpace));
  if (name == "islower" || name == "isupper") {
    bool has_cased = false;
    for (char c : s) {
      bool lower = c >= 'a' && c <= 'z';
      bool upper = c >= 'A' && c <= 'Z';
      if ((name == "islower" && upper) || (name == "isupper" && lower)) return Value::Bool(false);
      has_cased = has_cased || lower || upper;
    }
    return Value::Bool(has_cased);
  }
  return MethodError("unknown string method");
}

Result<Value> DictMethod(Interpreter& in, const Dict& dict, std::string_view name, const CallArgs& args) {
  PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(dict.items.size())));
  if (name == "get") {
    Value key = args.Get(0, "key");
    Value fallback = args.Get(1, "default");
    const Value* found = key.is_string() ? dict.Find(key.as_string()) : nullptr;
    if (found != nullptr) return *found;
    return fallback.is_undefined() ? Value::None() : fallback;
  }
  std::vector<Value> out;
  for (const auto& [key, value] : dict.items) {
    if (name == "keys") {
      out.push_back(Value::String(key));
    } else if (name == "values") {
      out.push_back(value);
    } else {
      auto pair = std::make_shared<List>();
      pair->is_tuple = true;
      pair->items = {Value::String(key), value};
      out.push_back(Value::FromList(std::move(pair)));
    }
  }
  return MakeList(std::move(out));
}

std::string SanitizeMessage(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (out.size() >= 200) break;
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

Result<Value> Range(Interpreter& in, const CallArgs& args) {
  for (const Value& v : args.positional)
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) return MethodError("range needs integers");
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  size_t n = args.positional.size();
  if (n == 1) {
    stop = args.positional[0].as_int();
  } else if (n == 2 || n == 3) {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (n == 3) step = args.positional[2].as_int();
  } else {
    return MethodError("range takes one to three arguments");
  }
  if (step == 0) return MethodError("range step must not be zero");
  long double span = static_cast<long double>(stop) - static_cast<long double>(start);
  long double count = span / static_cast<long double>(step);
  if (count > kMaxRange) return ResourceExhausted("range too big for the template sandbox");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    items.push_back(Value::Int(i));
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(items.size())));
  return MakeList(std::move(items));
}


}  // namespace


bool HasMethod(const Value& self, std::string_view name) {
  if (self.is_string())
    for (std::string_view m : kStringMethods)
      if (m == name) return true;
  if (self.is_dict() && self.as_dict().type == Dict::Type::kMapping)
    for (std::string_view m : kDictMethods)
      if (m == name) return true;
  return false;
}

Result<Value> CallMethod(Interpreter& in, const Value& self, std::string_view name, const CallArgs& args) {
  int64_t cost = 1 + (self.is_string() ? WorkOf(self) : 0);
  for (const Value& arg : args.positional) cost += arg.is_string() ? WorkOf(arg) : 0;
  PG_RETURN_IF_ERROR(in.Tick(cost));
  if (self.is_string()) return StringMethod(in, self.as_string(), name, args);
  if (self.is_dict()) return DictMethod(in, self.as_dict(), name, args);
  return MethodError("unknown method");
}

bool IsGlobalFunction(std::string_view name) {
  return name == "range" || name == "namespace" || name == "raise_exception" || name == "strftime_now" ||
         name == "dict";
}

Result<Value> CallGlobal(Interpreter& in, std::string_view name, const CallArgs& args) {
  if (name == "range") return Range(in, args);
  if (name == "namespace" || name == "dict") {
    auto dict = std::make_shared<Dict>();
    dict->type = name == "namespace" ? Dict::Type::kNamespace : Dict::Type::kMapping;
    for (const Value& v : args.positional) {
      if (!v.is_dict()) return MethodError("namespace() takes a mapping or keyword arguments");
      for (const auto& [key, item] : v.as_dict().items) dict->Set(key, item);
    }
    for (const auto& [key, item] : args.keyword) dict->Set(key, item);
    if (name == "namespace") {
      for (const auto& [key, item] : dict->items)
        if (ContainsNamespace(item, nullptr)) return MethodError("a namespace cannot hold another namespace");
    }
    return Value::FromDict(std::move(dict));
  }
  if (name == "raise_exception") {
    Value message = args.Get(0, "message");
    std::string text = message.is_string() ? message.as_string() : "";
    return InvalidArgument("chat template raised an exception: " + SanitizeMessage(text));
  }
  if (name == "strftime_now") {
    Value format = args.Get(0, "format");
    if (!format.is_string() || format.as_string().size() > 64) return MethodError("strftime_now needs a short format");
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), format.as_string().c_str(), &local);
    return Value::String(std::string(buf, n));
  }
  return MethodError("unknown function");
}

Result<bool> ApplyTest(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args) {
  PG_RETURN_IF_ERROR(in.Tick(1 + (input.is_string() ? WorkOf(input) : 0)));
  using K = Value::Kind;
  K k = input.kind();
  Value arg = args.Get(0, "");
  if (name == "defined") return k != K::kUndefined;
  if (name == "undefined") return k == K::kUndefined;
  if (name == "none") return k == K::kNone;
  if (name == "boolean") return k == K::kBool;
  if (name == "true") return k == K::kBool && input.as_bool();
  if (name == "false") return k == K::kBool && !input.as_bool();
  if (name == "integer") return k == K::kInt;
  if (name == "float") return k == K::kFloat;
  if (name == "number") return input.is_number();
  if (name == "string") return k == K::kString;
  if (name == "mapping") return k == K::kDict && input.as_dict().type == Dict::Type::kMapping;
  if (name == "iterable") return k == K::kString || k == K::kList || k == K::kDict || k == K::kUndefined;
  if (name == "sequence") return k == K::kString || k == K::kList || k == K::kUndefined ||
                                 (k == K::kDict && input.as_dict().type == Dict::Type::kMapping);
  if (name == "callable") return k == K::kCallable;
  if (name == "odd" || name == "even") {
    if (k != K::kInt && k != K::kBool) return MethodError("odd/even need an integer");
    bool odd = (input.as_int() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "divisibleby") {
    if (!input.is_number() || !arg.is_number()) return MethodError("divisibleby needs numbers");
    PG_ASSIGN_OR_RETURN(Value rem, BinaryOp(in, "%", input, arg));
    return !Truthy(rem);
  }
  if (name == "lower" || name == "upper") {  // str(value).islower() / isupper()
    PG_ASSIGN_OR_RETURN(std::string s, ToPyStr(input));
    CallArgs none;
    PG_ASSIGN_OR_RETURN(Value v, CallMethod(in, Value::String(std::move(s)), name == "lower" ? "islower" : "isupper", none));
    return v.as_bool();
  }
  if (name == "sameas") {
    if (k != arg.kind()) return false;
    if (k == K::kNone || k == K::kUndefined) return true;
    if (k == K::kBool) return input.as_bool() == arg.as_bool();
    if (k == K::kList) return input.list_ptr() == arg.list_ptr();
    if (k == K::kDict) return input.dict_ptr() == arg.dict_ptr();
    return PyEquals(input, arg);
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=") {
    int64_t work = 0;
    bool equal = PyEquals(input, arg, &work);
    PG_RETURN_IF_ERROR(in.Tick(work));
    return (name == "ne" || name == "!=") ? !equal : equal;
  }
  if (name == "in") return Contains(in, arg, input);
  if (name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" || name == "gt" ||
      name == "greaterthan" || name == ">" || name == "ge" || name == ">=") {
    int64_t work = 0;
    PG_ASSIGN_OR_RETURN(int c, PyCompare(input, arg, &work));
    PG_RETURN_IF_ERROR(in.Tick(work));
    if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
    if (name == "le" || name == "<=") return c <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
    return c >= 0;
  }
  return MethodError("unknown test");
}

}  // namespace peregrine::chat::jinja
