#include "chat/jinja_value.h"

#include <cmath>
#include <limits>

#include "chat/jinja_pystr.h"

namespace peregrine::chat::jinja {
namespace {

constexpr int kMaxValueDepth = 200;
constexpr size_t kIndexThreshold = 32;

Status TooDeep() { return InvalidArgument("template value nests too deeply"); }

Status AppendRepr(const Value& v, int depth, std::string& out);

Status AppendStr(const Value& v, int depth, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Status::Ok();
    case Value::Kind::kString: out += v.as_string(); return Status::Ok();
    default: return AppendRepr(v, depth, out);
  }
}

Status AppendRepr(const Value& v, int depth, std::string& out) {
  if (depth > kMaxValueDepth) return TooDeep();
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Status::Ok();
    case Value::Kind::kNone: out += "None"; return Status::Ok();
    case Value::Kind::kBool: out += v.as_bool() ? "True" : "False"; return Status::Ok();
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return Status::Ok();
    case Value::Kind::kFloat: out += PyFloatRepr(v.as_float()); return Status::Ok();
    case Value::Kind::kString: out += PyStrRepr(v.as_string()); return Status::Ok();
    case Value::Kind::kList: {
      const List& list = v.as_list();
      if (list.is_generator) {
        out += "<generator object>";
        return Status::Ok();
      }
      out += list.is_tuple ? '(' : '[';
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        PG_RETURN_IF_ERROR(AppendRepr(list.items[i], depth + 1, out));
      }
      if (list.is_tuple && list.items.size() == 1) out += ',';
      out += list.is_tuple ? ')' : ']';
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      const Dict& dict = v.as_dict();
      if (dict.type == Dict::Type::kLoop) {
        out += "<LoopContext " + std::to_string(dict.loop_index + 1) + "/" +
               std::to_string(dict.loop_items->size()) + ">";
        return Status::Ok();
      }
      if (dict.type == Dict::Type::kNamespace) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [key, item] : dict.items) {
        if (!first) out += ", ";
        first = false;
        out += PyStrRepr(key) + ": ";
        PG_RETURN_IF_ERROR(AppendRepr(item, depth + 1, out));
      }
      out += '}';
      if (dict.type == Dict::Type::kNamespace) out += '>';
      return Status::Ok();
    }
    case Value::Kind::kCallable: out += "<function>"; return Status::Ok();
  }
  return Status::Ok();
}

bool EqualsAt(const Value& a, const Value& b, int depth, int64_t* work) {
  if (depth > kMaxValueDepth) return false;
  if (work != nullptr) *work += 1 + (a.is_string() ? static_cast<int64_t>(a.as_string().size() / 64) : 0);
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.as_list().is_generator || b.as_list().is_generator) return a.list_ptr() == b.list_ptr();
      const auto& x = a.as_list().items;
      const auto& y = b.as_list().items;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!EqualsAt(x[i], y[i], depth + 1, work)) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [key, item] : x.items) {
        const Value* other = y.Find(key);
        if (other == nullptr || !EqualsAt(item, *other, depth + 1, work)) return false;
      }
      return true;
    }
    case Value::Kind::kCallable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

Result<int> CompareAt(const Value& a, const Value& b, int depth, int64_t* work) {
  if (depth > kMaxValueDepth) return TooDeep();
  if (work != nullptr) *work += 1 + (a.is_string() ? static_cast<int64_t>(a.as_string().size() / 64) : 0);
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      double x = a.as_float();
      double y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code-point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (EqualsAt(x[i], y[i], depth + 1, work)) continue;
      return CompareAt(x[i], y[i], depth + 1, work);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return InvalidArgument("values of these types cannot be ordered");
}

Result<Value> FromJsonAt(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  using T = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case T::null: return Value::None();
    case T::boolean: return Value::Bool(json.get<bool>());
    case T::number_integer: return Value::Int(json.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case T::number_float: return Value::Float(json.get<double>());
    case T::string: return Value::String(json.get<std::string>());
    case T::array: {
      auto list = std::make_shared<List>();
      list->items.reserve(json.size());
      for (const auto& item : json) {
        PG_ASSIGN_OR_RETURN(Value v, FromJsonAt(item, depth + 1));
        list->items.push_back(std::move(v));
      }
      return Value::FromList(std::move(list));
    }
    case T::object: {
      auto dict = std::make_shared<Dict>();
      for (auto it = json.begin(); it != json.end(); ++it) {
        PG_ASSIGN_OR_RETURN(Value v, FromJsonAt(it.value(), depth + 1));
        dict->Set(it.key(), std::move(v));
      }
      return Value::FromDict(std::move(dict));
    }
    case T::binary:
    case T::discarded: break;
  }
  return InvalidArgument("unsupported JSON value");
}

Result<nlohmann::ordered_json> ToJsonAt(const Value& v, int depth) {
  if (depth > kMaxValueDepth) return TooDeep();
  switch (v.kind()) {
    case Value::Kind::kNone: return nlohmann::ordered_json(nullptr);
    case Value::Kind::kBool: return nlohmann::ordered_json(v.as_bool());
    case Value::Kind::kInt: return nlohmann::ordered_json(v.as_int());
    case Value::Kind::kFloat: return nlohmann::ordered_json(v.as_float());
    case Value::Kind::kString: return nlohmann::ordered_json(v.as_string());
    case Value::Kind::kList: {
      if (v.as_list().is_generator) break;
      auto out = nlohmann::ordered_json::array();
      for (const Value& item : v.as_list().items) {
        PG_ASSIGN_OR_RETURN(auto j, ToJsonAt(item, depth + 1));
        out.push_back(std::move(j));
      }
      return out;
    }
    case Value::Kind::kDict: {
      if (v.as_dict().type != Dict::Type::kMapping) break;
      auto out = nlohmann::ordered_json::object();
      for (const auto& [key, item] : v.as_dict().items) {
        PG_ASSIGN_OR_RETURN(auto j, ToJsonAt(item, depth + 1));
        out[key] = std::move(j);
      }
      return out;
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kCallable: break;
  }
  return InvalidArgument("value is not JSON serializable");
}

bool ContainsNamespaceAt(const Value& v, int depth, int64_t* work) {
  if (depth > kMaxValueDepth) return true;  // refuse rather than recurse further
  if (work != nullptr) ++*work;
  if (v.is_list()) {
    for (const Value& item : v.as_list().items)
      if (ContainsNamespaceAt(item, depth + 1, work)) return true;
  } else if (v.is_dict()) {
    if (v.as_dict().type == Dict::Type::kNamespace) return true;
    if (v.as_dict().type == Dict::Type::kLoop)
      for (const Value& item : *v.as_dict().loop_items)
        if (ContainsNamespaceAt(item, depth + 1, work)) return true;
    for (const auto& [key, item] : v.as_dict().items)
      if (ContainsNamespaceAt(item, depth + 1, work)) return true;
  } else if (v.is_callable()) {
    return ContainsNamespaceAt(v.as_callable().self, depth + 1, work);
  }
  return false;
}

}  // namespace

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::FromList(ListPtr list) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::move(list);
  return v;
}
Value Value::FromDict(DictPtr dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::move(dict);
  return v;
}
Value Value::FromCallable(CallablePtr callable) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::move(callable);
  return v;
}

const Value* Dict::Find(std::string_view key) const {
  if (!index_.empty()) {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::Set(const std::string& key, Value value) {
  for (size_t i = 0; index_.empty() && i < items.size(); ++i) {
    if (items[i].first == key) {
      items[i].second = std::move(value);
      return;
    }
  }
  if (!index_.empty()) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      items[it->second].second = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
  if (!index_.empty()) {
    index_.emplace(key, items.size() - 1);
  } else if (items.size() > kIndexThreshold) {
    Reindex();
  }
}

void Dict::Reindex() {
  index_.clear();
  for (size_t i = 0; i < items.size(); ++i) index_.emplace(items[i].first, i);
}

Value LoopAttribute(const Dict& loop, std::string_view name) {
  auto n = static_cast<int64_t>(loop.loop_items->size());
  auto i = static_cast<int64_t>(loop.loop_index);
  if (name == "index0") return Value::Int(i);
  if (name == "index") return Value::Int(i + 1);
  if (name == "revindex0") return Value::Int(n - i - 1);
  if (name == "revindex") return Value::Int(n - i);
  if (name == "first") return Value::Bool(i == 0);
  if (name == "last") return Value::Bool(i == n - 1);
  if (name == "length") return Value::Int(n);
  if (name == "depth") return Value::Int(1);
  if (name == "depth0") return Value::Int(0);
  if (name == "previtem") return i > 0 ? (*loop.loop_items)[loop.loop_index - 1] : Value();
  if (name == "nextitem") return i + 1 < n ? (*loop.loop_items)[loop.loop_index + 1] : Value();
  if (name == "cycle") {
    auto cycle = std::make_shared<Callable>();
    cycle->type = Callable::Type::kLoopCycle;
    cycle->self = Value::Int(i);
    return Value::FromCallable(std::move(cycle));
  }
  return Value();
}

const char* KindName(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kUndefined: return "undefined";
    case Value::Kind::kNone: return "none";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "string";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "mapping";
    case Value::Kind::kCallable: return "callable";
  }
  return "unknown";
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_float() != 0.0;
    case Value::Kind::kString: return !v.as_string().empty();
    case Value::Kind::kList: return v.as_list().is_generator || !v.as_list().items.empty();
    case Value::Kind::kDict: return v.as_dict().type != Dict::Type::kMapping || !v.as_dict().items.empty();
    case Value::Kind::kCallable: return true;
  }
  return false;
}

Result<std::string> ToPyStr(const Value& v) {
  std::string out;
  PG_RETURN_IF_ERROR(AppendStr(v, 0, out));
  return out;
}

Result<std::string> ToPyRepr(const Value& v) {
  std::string out;
  PG_RETURN_IF_ERROR(AppendRepr(v, 0, out));
  return out;
}

bool PyEquals(const Value& a, const Value& b, int64_t* work) { return EqualsAt(a, b, 0, work); }
Result<int> PyCompare(const Value& a, const Value& b, int64_t* work) { return CompareAt(a, b, 0, work); }

int64_t WorkOf(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(v.as_string().size() / 32);
  if (v.is_list()) return static_cast<int64_t>(v.as_list().items.size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  return 0;
}
Result<Value> FromJson(const nlohmann::ordered_json& json) { return FromJsonAt(json, 0); }
Result<nlohmann::ordered_json> ToJson(const Value& v) { return ToJsonAt(v, 0); }
bool ContainsNamespace(const Value& v, int64_t* work) { return ContainsNamespaceAt(v, 0, work); }

}  // namespace peregrine::chat::jinja
