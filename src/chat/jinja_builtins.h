// Internal: operators, attribute and item access, and the builtin filters, tests, methods and
// global functions of the Jinja subset. Everything not listed here does not exist for templates.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_value.h"

namespace peregrine::chat::jinja {

// + - * / // % ** with Python semantics (int overflow is an error, not a wrap).
Result<Value> BinaryOp(Interpreter& in, std::string_view op, const Value& a, const Value& b);

// `obj.name`: a mapping's key, a namespace or loop attribute, or a whitelisted method (returned as
// a bound callable). Names starting with "_" are refused; attributes of undefined are an error.
Result<Value> GetAttr(const Value& obj, std::string_view name);
// `obj[key]`: mapping key (then method fallback), list or string index; misses are undefined.
Result<Value> GetItem(Interpreter& in, const Value& obj, const Value& key);
Result<Value> SliceValue(Interpreter& in, const Value& obj, const Value& start, const Value& stop,
                         const Value& step);
Result<bool> Contains(Interpreter& in, const Value& container, const Value& item);
// Items of a for loop: list items, mapping keys, string characters; undefined iterates as empty.
Result<std::vector<Value>> Iterate(Interpreter& in, const Value& v);

Result<Value> ApplyFilter(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args);
Result<bool> ApplyTest(Interpreter& in, std::string_view name, const Value& input, const CallArgs& args);
Result<Value> CallMethod(Interpreter& in, const Value& self, std::string_view name, const CallArgs& args);
bool HasMethod(const Value& self, std::string_view name);
bool IsGlobalFunction(std::string_view name);
Result<Value> CallGlobal(Interpreter& in, std::string_view name, const CallArgs& args);

}  // namespace peregrine::chat::jinja
