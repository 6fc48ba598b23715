// Operators, attribute/item access, slicing, membership and iteration for the Jinja subset.
#include <cmath>
#include <limits>

#include "chat/jinja_builtins.h"
#include "chat/jinja_pystr.h"

namespace peregrine::chat::jinja {
namespace {

Status TypeError(const char* what) { return InvalidArgument(std::string("template error: ") + what); }

bool IsIntLike(const Value& v) { return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool; }

Result<Value> Repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(times) > std::numeric_limits<size_t>::max() / s.size())
      return ResourceExhausted("template output exceeds the size limit");
    size_t total = s.size() * static_cast<size_t>(times);
    PG_RETURN_IF_ERROR(in.CheckSize(total));
    PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(total / 64)));
    std::string out;
    out.reserve(total);
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::String(std::move(out));
  }
  const auto& items = seq.as_list().items;
  constexpr uint64_t kMaxRepeatedItems = 1u << 24;
  if (!items.empty() && static_cast<uint64_t>(times) > kMaxRepeatedItems / items.size())
    return ResourceExhausted("template exceeded its step budget");
  PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(items.size()) * times));
  auto list = std::make_shared<List>();
  list->is_tuple = seq.as_list().is_tuple;
  for (int64_t i = 0; i < times; ++i) list->items.insert(list->items.end(), items.begin(), items.end());
  return Value::FromList(std::move(list));
}

Result<Value> IntPow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return TypeError("integer overflow");
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return TypeError("integer overflow");
  }
  return Value::Int(result);
}

Result<Value> Arithmetic(std::string_view op, const Value& a, const Value& b) {
  bool as_float = a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat;
  if (op == "/") {
    if (b.as_float() == 0.0) return TypeError("division by zero");
    return Value::Float(a.as_float() / b.as_float());
  }
  if (as_float) {
    double x = a.as_float();
    double y = b.as_float();
    if (op == "+") return Value::Float(x + y);
    if (op == "-") return Value::Float(x - y);
    if (op == "*") return Value::Float(x * y);
    if (op == "**") {
      if (x < 0 && std::floor(y) != y) return TypeError("negative number raised to a fractional power");
      if (x == 0 && y < 0) return TypeError("division by zero");
      return Value::Float(std::pow(x, y));
    }
    if (y == 0.0) return TypeError("division by zero");
    // CPython's float divmod.
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0.0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    if (op == "%") return Value::Float(mod);
    double floordiv = 0.0;
    if (div != 0.0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value::Float(floordiv);
  }
  int64_t x = a.as_int();
  int64_t y = b.as_int();
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) return TypeError("integer overflow");
    return Value::Int(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) return TypeError("integer overflow");
    return Value::Int(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) return TypeError("integer overflow");
    return Value::Int(r);
  }
  if (op == "**") {
    if (y < 0) {
      if (x == 0) return TypeError("division by zero");
      return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
    }
    return IntPow(x, y);
  }
  if (y == 0) return TypeError("division by zero");
  if (x == std::numeric_limits<int64_t>::min() && y == -1) return TypeError("integer overflow");
  int64_t q = x / y;
  int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    m += y;
    --q;
  }
  return Value::Int(op == "%" ? m : q);
}

// Python slice.indices for a sequence of `length`.
Status SliceIndices(const Value& start, const Value& stop, const Value& step, int64_t length, int64_t& first,
                    int64_t& last, int64_t& stride) {
  for (const Value* v : {&start, &stop, &step})
    if (!v->is_none() && !v->is_undefined() && !IsIntLike(*v)) return TypeError("slice indices must be integers");
  stride = step.is_none() || step.is_undefined() ? 1 : step.as_int();
  if (stride == 0) return TypeError("slice step cannot be zero");
  if (stride == std::numeric_limits<int64_t>::min()) stride = -std::numeric_limits<int64_t>::max();
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) {
      i = i < -length ? (stride < 0 ? -1 : 0) : i + length;
    } else if (i >= length) {
      i = stride < 0 ? length - 1 : length;
    }
    return i;
  };
  first = clamp(start, stride < 0 ? length - 1 : 0);
  last = clamp(stop, stride < 0 ? -1 : length);
  return Status::Ok();
}

Value BoundMethod(const Value& self, std::string_view name) {
  auto fn = std::make_shared<Callable>();
  fn->type = Callable::Type::kMethod;
  fn->name = std::string(name);
  fn->self = self;
  return Value::FromCallable(std::move(fn));
}

}  // namespace

Result<Value> BinaryOp(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return Arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      PG_RETURN_IF_ERROR(in.CheckSize(a.as_string().size() + b.as_string().size()));
      PG_RETURN_IF_ERROR(in.Tick(WorkOf(a) + WorkOf(b)));
      return Value::String(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && !a.as_list().is_generator && !b.as_list().is_generator) {
      PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(a.as_list().items.size() + b.as_list().items.size())));
      auto list = std::make_shared<List>(a.as_list());
      list->items.insert(list->items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::FromList(std::move(list));
    }
  }
  if (op == "*") {
    auto repeatable = [](const Value& v) { return v.is_string() || (v.is_list() && !v.as_list().is_generator); };
    if (repeatable(a) && IsIntLike(b)) return Repeat(in, a, b.as_int());
    if (repeatable(b) && IsIntLike(a)) return Repeat(in, b, a.as_int());
  }
  if (a.is_undefined() || b.is_undefined()) return TypeError("undefined value used in an operation");
  return TypeError("unsupported operand types");
}

Result<Value> GetAttr(const Value& obj, std::string_view name) {
  if (!name.empty() && name[0] == '_') return TypeError("access to private attributes is not allowed");
  if (obj.is_undefined()) return TypeError("attribute of an undefined value");
  if (obj.is_dict()) {
    const Dict& dict = obj.as_dict();
    if (dict.type == Dict::Type::kLoop) return LoopAttribute(dict, name);
    if (dict.type == Dict::Type::kMapping && HasMethod(obj, name)) return BoundMethod(obj, name);
    const Value* found = dict.Find(name);
    return found != nullptr ? *found : Value();
  }
  if (HasMethod(obj, name)) return BoundMethod(obj, name);
  return Value();
}

Result<Value> GetItem(Interpreter& in, const Value& obj, const Value& key) {
  if (obj.is_undefined()) return TypeError("item of an undefined value");
  if (obj.is_string()) PG_RETURN_IF_ERROR(in.Tick(WorkOf(obj)));
  if (obj.is_dict()) {
    if (!key.is_string()) return Value();
    if (obj.as_dict().type == Dict::Type::kLoop) return LoopAttribute(obj.as_dict(), key.as_string());
    const Value* found = obj.as_dict().Find(key.as_string());
    if (found != nullptr) return *found;
    const std::string& name = key.as_string();
    if (!name.empty() && name[0] != '_' && obj.as_dict().type == Dict::Type::kMapping && HasMethod(obj, name))
      return BoundMethod(obj, name);
    return Value();
  }
  if (obj.is_list() && obj.as_list().is_generator) return Value();
  if (obj.is_list() && IsIntLike(key)) {
    const auto& items = obj.as_list().items;
    int64_t i = key.as_int();
    auto n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    return items[static_cast<size_t>(i)];
  }
  if (obj.is_string() && IsIntLike(key)) {
    std::vector<size_t> offsets = CodePointOffsets(obj.as_string());
    auto n = static_cast<int64_t>(offsets.size() - 1);
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value();
    auto u = static_cast<size_t>(i);
    return Value::String(obj.as_string().substr(offsets[u], offsets[u + 1] - offsets[u]));
  }
  if (obj.is_string() && key.is_string()) return GetAttr(obj, key.as_string());
  return Value();
}

Result<Value> SliceValue(Interpreter& in, const Value& obj, const Value& start, const Value& stop,
                         const Value& step) {
  if (obj.is_undefined()) return TypeError("item of an undefined value");
  if ((!obj.is_list() && !obj.is_string()) || (obj.is_list() && obj.as_list().is_generator))
    return TypeError("value cannot be sliced");
  std::vector<size_t> offsets;
  int64_t length = 0;
  PG_RETURN_IF_ERROR(in.Tick(WorkOf(obj)));
  if (obj.is_string()) {
    offsets = CodePointOffsets(obj.as_string());
    length = static_cast<int64_t>(offsets.size() - 1);
  } else {
    length = static_cast<int64_t>(obj.as_list().items.size());
  }
  int64_t first = 0;
  int64_t last = 0;
  int64_t stride = 1;
  PG_RETURN_IF_ERROR(SliceIndices(start, stop, step, length, first, last, stride));
  std::vector<int64_t> picks;
  for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride) {
    picks.push_back(i);
    if ((stride > 0 && i > std::numeric_limits<int64_t>::max() - stride) ||
        (stride < 0 && i < std::numeric_limits<int64_t>::min() - stride))
      break;
  }
  PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(picks.size())));
  if (obj.is_string()) {
    std::string out;
    for (int64_t i : picks) {
      auto u = static_cast<size_t>(i);
      out.append(obj.as_string(), offsets[u], offsets[u + 1] - offsets[u]);
    }
    return Value::String(std::move(out));
  }
  auto list = std::make_shared<List>();
  list->is_tuple = obj.as_list().is_tuple;
  for (int64_t i : picks) list->items.push_back(obj.as_list().items[static_cast<size_t>(i)]);
  return Value::FromList(std::move(list));
}

Result<bool> Contains(Interpreter& in, const Value& container, const Value& item) {
  if (container.is_string()) {
    PG_RETURN_IF_ERROR(in.Tick(WorkOf(container)));
    if (!item.is_string()) return TypeError("'in <string>' needs a string on the left");
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    int64_t work = 0;
    bool found = false;
    for (const Value& v : container.as_list().items) {
      if (PyEquals(v, item, &work)) {
        found = true;
        break;
      }
    }
    PG_RETURN_IF_ERROR(in.Tick(work));
    return found;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().Find(item.as_string()) != nullptr;
  if (container.is_undefined()) return false;
  return TypeError("value is not a container");
}

Result<std::vector<Value>> Iterate(Interpreter& in, const Value& v) {
  std::vector<Value> items;
  if (v.is_undefined()) return items;
  if (v.is_list()) {
    items = v.as_list().items;
  } else if (v.is_dict()) {
    for (const auto& [key, unused] : v.as_dict().items) items.push_back(Value::String(key));
  } else if (v.is_string()) {
    const std::string& s = v.as_string();
    std::vector<size_t> offsets = CodePointOffsets(s);
    for (size_t i = 0; i + 1 < offsets.size(); ++i)
      items.push_back(Value::String(s.substr(offsets[i], offsets[i + 1] - offsets[i])));
  } else {
    return TypeError("value is not iterable");
  }
  PG_RETURN_IF_ERROR(in.Tick(static_cast<int64_t>(items.size())));
  return items;
}

}  // namespace peregrine::chat::jinja
