// Values of the Jinja subset: Python's data model reduced to what chat templates use. Lists and
// mappings are immutable once built (the sandbox forbids mutation, as Jinja's immutable sandbox
// does); only namespaces change, through `{% set ns.attr = ... %}`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace peregrine::chat::jinja {

class Value;
struct List;
struct Dict;
struct Callable;
using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;
using CallablePtr = std::shared_ptr<const Callable>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value FromList(ListPtr list);
  static Value FromDict(DictPtr dict);
  static Value FromCallable(CallablePtr callable);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *s_; }
  const List& as_list() const { return *list_; }
  const ListPtr& list_ptr() const { return list_; }
  Dict& as_dict() const { return *dict_; }
  const DictPtr& dict_ptr() const { return dict_; }
  const Callable& as_callable() const { return *callable_; }

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::shared_ptr<const std::string> s_;
  ListPtr list_;
  DictPtr dict_;
  CallablePtr callable_;
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes how it prints: (a, b)
  // Results of map/select/reject/selectattr/rejectattr, which are generators in jinja2: always
  // true, iterable, but without len(), indexing or JSON. Evaluated eagerly here.
  bool is_generator = false;
};

struct Dict {
  // kMapping: template data (a Python dict); kNamespace: namespace(), the one mutable kind;
  // kLoop: a for loop's `loop` object, whose attributes are computed from loop_items/loop_index.
  enum class Type { kMapping, kNamespace, kLoop };
  Type type = Type::kMapping;
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python dicts keep it
  std::shared_ptr<const std::vector<Value>> loop_items;  // kLoop only
  size_t loop_index = 0;                                 // kLoop only

  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value value);  // replaces in place or appends

 private:
  void Reindex();
  std::unordered_map<std::string, size_t> index_;  // built once the dict grows past a few keys
};

struct Callable {
  enum class Type { kGlobal, kMethod, kMacro, kLoopCycle };
  Type type = Type::kGlobal;
  std::string name;            // global function or method name
  Value self;                  // method receiver; kLoopCycle: the loop index
  const void* macro = nullptr;  // kMacro: the macro's AST node (owned by the template)
};

const char* KindName(Value::Kind kind);

// An attribute of a `loop` object (index, index0, revindex, revindex0, first, last, length,
// previtem, nextitem, depth, depth0, cycle); undefined for other names.
Value LoopAttribute(const Dict& loop, std::string_view name);

// Python truth value; undefined is false.
bool Truthy(const Value& v);

// str(v) as Jinja prints it: None -> "None", True -> "True", floats as repr, lists and dicts as
// their Python repr, undefined -> "". Fails on values nested deeper than the depth limit.
Result<std::string> ToPyStr(const Value& v);
Result<std::string> ToPyRepr(const Value& v);

// Python ==, with ints, floats and bools comparing numerically. When `work` is given, it grows by
// the number of values visited (so callers can charge nested comparisons to the step budget).
bool PyEquals(const Value& a, const Value& b, int64_t* work = nullptr);

// Python ordering (<) for numbers, strings and lists; other pairs are kInvalidArgument.
Result<int> PyCompare(const Value& a, const Value& b, int64_t* work = nullptr);

// Rough cost of handling `v` once: strings by length, containers by item count.
int64_t WorkOf(const Value& v);

// JSON <-> values. Integers beyond int64 become floats. Depth is limited to keep recursion bounded.
Result<Value> FromJson(const nlohmann::ordered_json& json);
Result<nlohmann::ordered_json> ToJson(const Value& v);

// True when `v` holds a namespace anywhere inside it (namespaces may not nest, which keeps
// reference cycles impossible).
bool ContainsNamespace(const Value& v, int64_t* work = nullptr);

}  // namespace peregrine::chat::jinja
