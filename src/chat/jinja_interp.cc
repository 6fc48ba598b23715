#include "chat/jinja_interp.h"

#include "chat/jinja_builtins.h"

namespace peregrine::chat::jinja {
namespace {

// A loop iteration pushes a scope and builds a `loop` object, several times the work of an
// expression node; weighting it keeps the step budget close to a bound on wall time.
constexpr int64_t kLoopIterationCost = 8;

Status RuntimeError(int line, const char* reason) {
  return InvalidArgument("template error at line " + std::to_string(line) + ": " + reason);
}

Value MakeLoop(size_t index, const std::shared_ptr<const std::vector<Value>>& items) {
  auto loop = std::make_shared<Dict>();
  loop->type = Dict::Type::kLoop;
  loop->loop_items = items;
  loop->loop_index = index;
  return Value::FromDict(std::move(loop));
}

}  // namespace

Value CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [key, value] : keyword)
    if (key == name) return value;
  return Value();
}

const Value* Interpreter::Frame::Find(const std::string& name) const {
  for (const auto& [key, value] : vars)
    if (key == name) return &value;
  return nullptr;
}

void Interpreter::Frame::Set(const std::string& name, Value value) {
  for (auto& [key, existing] : vars) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

Status Interpreter::Run(const NodeList& body, std::unordered_map<std::string, Value> globals, std::string& out) {
  frames_.clear();
  Frame root;
  for (auto& [name, value] : globals) root.vars.emplace_back(name, std::move(value));
  frames_.push_back(std::move(root));
  PG_ASSIGN_OR_RETURN(Flow flow, Exec(body, out));
  (void)flow;
  return Status::Ok();
}

Status Interpreter::Tick(int64_t cost) {
  steps_ += cost;
  if (steps_ > limits_.max_steps) return ResourceExhausted("template exceeded its step budget");
  return Status::Ok();
}

Status Interpreter::CheckSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) return ResourceExhausted("template output exceeds the size limit");
  return Status::Ok();
}

Status Interpreter::Append(std::string& out, std::string_view text) {
  PG_RETURN_IF_ERROR(CheckSize(out.size() + text.size()));
  PG_RETURN_IF_ERROR(Tick(static_cast<int64_t>(text.size() / 256)));
  out.append(text);
  return Status::Ok();
}

Value Interpreter::Lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
    if (const Value* found = it->Find(name)) return *found;
  if (IsGlobalFunction(name)) {
    auto fn = std::make_shared<Callable>();
    fn->type = Callable::Type::kGlobal;
    fn->name = name;
    return Value::FromCallable(std::move(fn));
  }
  return Value();
}

void Interpreter::Assign(const std::string& name, Value value) { frames_.back().Set(name, std::move(value)); }

Result<Interpreter::Flow> Interpreter::Exec(const NodeList& body, std::string& out) {
  for (const NodePtr& node : body) {
    PG_ASSIGN_OR_RETURN(Flow flow, ExecNode(*node, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::ExecNode(const Node& node, std::string& out) {
  PG_RETURN_IF_ERROR(Tick());
  switch (node.type) {
    case Node::Type::kText:
      PG_RETURN_IF_ERROR(Append(out, node.text));
      return Flow::kNormal;
    case Node::Type::kOutput: {
      PG_ASSIGN_OR_RETURN(Value v, Eval(*node.expr));
      PG_ASSIGN_OR_RETURN(std::string text, ToPyStr(v));
      PG_RETURN_IF_ERROR(Append(out, text));
      return Flow::kNormal;
    }
    case Node::Type::kIf:
      for (const auto& [cond, body] : node.branches) {
        PG_ASSIGN_OR_RETURN(Value v, Eval(*cond));
        if (Truthy(v)) return Exec(body, out);
      }
      return Exec(node.else_body, out);
    case Node::Type::kFor: return ExecFor(node, out);
    case Node::Type::kSet:
      PG_RETURN_IF_ERROR(ExecSet(node));
      return Flow::kNormal;
    case Node::Type::kSetBlock: {
      std::string captured;
      PG_ASSIGN_OR_RETURN(Flow flow, Exec(node.body, captured));
      Assign(node.text, Value::String(std::move(captured)));
      return flow;
    }
    case Node::Type::kMacro: {
      auto macro = std::make_shared<Callable>();
      macro->type = Callable::Type::kMacro;
      macro->name = node.text;
      macro->macro = &node;
      Assign(node.text, Value::FromCallable(std::move(macro)));
      return Flow::kNormal;
    }
    case Node::Type::kBreak:
    case Node::Type::kContinue:
      if (loop_depth_ == 0) return RuntimeError(node.line, "break or continue outside a loop");
      return node.type == Node::Type::kBreak ? Flow::kBreak : Flow::kContinue;
    case Node::Type::kBlock: return Exec(node.body, out);
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::ExecFor(const Node& node, std::string& out) {
  PG_ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*this, iterable));

  auto bind = [&](const Value& item) -> Status {
    if (node.targets.size() == 1) {
      Assign(node.targets[0], item);
      return Status::Ok();
    }
    if (!item.is_list() || item.as_list().items.size() != node.targets.size())
      return RuntimeError(node.line, "cannot unpack loop item into the loop variables");
    for (size_t i = 0; i < node.targets.size(); ++i) Assign(node.targets[i], item.as_list().items[i]);
    return Status::Ok();
  };

  if (node.filter != nullptr) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      PG_RETURN_IF_ERROR(Tick());
      frames_.emplace_back();
      Status bound = bind(item);
      Result<Value> keep = bound.ok() ? Eval(*node.filter) : Result<Value>(bound);
      frames_.pop_back();
      if (!keep.ok()) return keep.status();
      if (Truthy(*keep)) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return Exec(node.else_body, out);

  auto shared_items = std::make_shared<const std::vector<Value>>(std::move(items));
  const std::vector<Value>& loop_items = *shared_items;
  ++loop_depth_;
  Status status;
  // One scope per loop, emptied at each iteration (Jinja gives every iteration a fresh scope);
  // the `loop` object is reused unless the body kept a reference to it.
  frames_.emplace_back();
  Value loop;
  for (size_t i = 0; i < loop_items.size() && status.ok(); ++i) {
    status = Tick(kLoopIterationCost);
    if (!status.ok()) break;
    frames_.back().vars.clear();
    status = bind(loop_items[i]);
    if (!status.ok()) break;
    if (loop.is_dict() && loop.dict_ptr().use_count() == 1) {
      loop.as_dict().loop_index = i;
    } else {
      loop = MakeLoop(i, shared_items);
    }
    Assign("loop", loop);
    Result<Flow> flow = Exec(node.body, out);
    if (!flow.ok()) status = flow.status();
    else if (*flow == Flow::kBreak) break;
  }
  frames_.pop_back();
  --loop_depth_;
  PG_RETURN_IF_ERROR(status);
  return Flow::kNormal;
}

Status Interpreter::ExecSet(const Node& node) {
  PG_ASSIGN_OR_RETURN(Value value, Eval(*node.expr));
  if (!node.attr.empty()) {
    Value target = Lookup(node.text);
    if (!target.is_dict() || target.as_dict().type != Dict::Type::kNamespace)
      return RuntimeError(node.line, "can only set attributes of a namespace");
    if (node.attr[0] == '_') return RuntimeError(node.line, "access to private attributes is not allowed");
    int64_t work = 0;
    bool nested = ContainsNamespace(value, &work);
    PG_RETURN_IF_ERROR(Tick(work));
    if (nested) return RuntimeError(node.line, "a namespace cannot hold another namespace");
    target.as_dict().Set(node.attr, std::move(value));
    return Status::Ok();
  }
  if (node.targets.empty()) {
    Assign(node.text, std::move(value));
    return Status::Ok();
  }
  if (!value.is_list() || value.as_list().items.size() != node.targets.size())
    return RuntimeError(node.line, "cannot unpack value into the set targets");
  for (size_t i = 0; i < node.targets.size(); ++i) Assign(node.targets[i], value.as_list().items[i]);
  return Status::Ok();
}

Status Interpreter::EvalArgs(const Expr& expr, size_t first, CallArgs& args) {
  for (size_t i = first; i < expr.args.size(); ++i) {
    PG_ASSIGN_OR_RETURN(Value v, Eval(*expr.args[i]));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [key, value_expr] : expr.kwargs) {
    PG_ASSIGN_OR_RETURN(Value v, Eval(*value_expr));
    args.keyword.emplace_back(key, std::move(v));
  }
  return Status::Ok();
}

Result<Value> Interpreter::Call(const Value& callee, const CallArgs& args) {
  PG_RETURN_IF_ERROR(Tick());
  if (!callee.is_callable()) return InvalidArgument("template error: value is not callable");
  const Callable& fn = callee.as_callable();
  switch (fn.type) {
    case Callable::Type::kGlobal: return CallGlobal(*this, fn.name, args);
    case Callable::Type::kMethod: return CallMethod(*this, fn.self, fn.name, args);
    case Callable::Type::kMacro: return CallMacro(*static_cast<const Node*>(fn.macro), args);
    case Callable::Type::kLoopCycle: {
      if (args.positional.empty()) return InvalidArgument("template error: loop.cycle needs arguments");
      auto n = static_cast<int64_t>(args.positional.size());
      return args.positional[static_cast<size_t>(fn.self.as_int() % n)];
    }
  }
  return InvalidArgument("template error: value is not callable");
}

Result<Value> Interpreter::CallMacro(const Node& macro, const CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) return ResourceExhausted("template macro calls nest too deeply");
  if (args.positional.size() > macro.params.size())
    return RuntimeError(macro.line, "macro called with too many arguments");
  Frame locals;
  for (size_t i = 0; i < macro.params.size(); ++i) {
    Value v = args.Get(i, macro.params[i]);
    if (v.is_undefined() && macro.defaults[i] != nullptr) {
      PG_ASSIGN_OR_RETURN(v, Eval(*macro.defaults[i]));
    }
    locals.Set(macro.params[i], std::move(v));
  }
  // The macro sees the template's top-level scope and its own arguments, not the caller's locals.
  std::vector<Frame> saved;
  saved.swap(frames_);
  frames_.push_back(saved.front());
  frames_.push_back(std::move(locals));
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  ++call_depth_;
  std::string out;
  Result<Flow> flow = Exec(macro.body, out);
  --call_depth_;
  loop_depth_ = saved_loops;
  frames_.swap(saved);
  if (!flow.ok()) return flow.status();
  return Value::String(std::move(out));
}

Result<Value> Interpreter::EvalSubscript(const Expr& expr) {
  PG_ASSIGN_OR_RETURN(Value obj, Eval(*expr.args[0]));
  const Expr& index = *expr.args[1];
  if (index.type != Expr::Type::kSlice) {
    PG_ASSIGN_OR_RETURN(Value key, Eval(index));
    return GetItem(*this, obj, key);
  }
  Value bounds[3];
  for (size_t i = 0; i < 3; ++i) {
    if (index.args[i] != nullptr) {
      PG_ASSIGN_OR_RETURN(bounds[i], Eval(*index.args[i]));
    } else {
      bounds[i] = Value::None();
    }
  }
  return SliceValue(*this, obj, bounds[0], bounds[1], bounds[2]);
}

Result<Value> Interpreter::EvalCompare(const Expr& expr) {
  PG_ASSIGN_OR_RETURN(Value left, Eval(*expr.args[0]));
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    PG_ASSIGN_OR_RETURN(Value right, Eval(*expr.args[i + 1]));
    const std::string& op = expr.ops[i];
    bool result = false;
    int64_t work = 0;
    if (op == "==") {
      result = PyEquals(left, right, &work);
    } else if (op == "!=") {
      result = !PyEquals(left, right, &work);
    } else if (op == "in" || op == "notin") {
      PG_ASSIGN_OR_RETURN(bool found, Contains(*this, right, left));
      result = op == "in" ? found : !found;
    } else {
      PG_ASSIGN_OR_RETURN(int c, PyCompare(left, right, &work));
      result = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    PG_RETURN_IF_ERROR(Tick(work));
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Result<Value> Interpreter::Eval(const Expr& expr) {
  PG_RETURN_IF_ERROR(Tick());
  switch (expr.type) {
    case Expr::Type::kConst: return expr.value;
    case Expr::Type::kName: return Lookup(expr.name);
    case Expr::Type::kList:
    case Expr::Type::kTuple: {
      auto list = std::make_shared<List>();
      list->is_tuple = expr.type == Expr::Type::kTuple;
      for (const ExprPtr& item : expr.args) {
        PG_ASSIGN_OR_RETURN(Value v, Eval(*item));
        list->items.push_back(std::move(v));
      }
      return Value::FromList(std::move(list));
    }
    case Expr::Type::kDict: {
      auto dict = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
        PG_ASSIGN_OR_RETURN(Value key, Eval(*expr.args[i]));
        if (!key.is_string()) return RuntimeError(expr.line, "mapping keys must be strings");
        PG_ASSIGN_OR_RETURN(Value v, Eval(*expr.args[i + 1]));
        dict->Set(key.as_string(), std::move(v));
      }
      return Value::FromDict(std::move(dict));
    }
    case Expr::Type::kGetAttr: {
      PG_ASSIGN_OR_RETURN(Value obj, Eval(*expr.args[0]));
      return GetAttr(obj, expr.name);
    }
    case Expr::Type::kGetItem: return EvalSubscript(expr);
    case Expr::Type::kSlice: return RuntimeError(expr.line, "slice outside a subscript");
    case Expr::Type::kCall: {
      PG_ASSIGN_OR_RETURN(Value callee, Eval(*expr.args[0]));
      CallArgs args;
      PG_RETURN_IF_ERROR(EvalArgs(expr, 1, args));
      return Call(callee, args);
    }
    case Expr::Type::kFilter: {
      PG_ASSIGN_OR_RETURN(Value input, Eval(*expr.args[0]));
      CallArgs args;
      PG_RETURN_IF_ERROR(EvalArgs(expr, 1, args));
      return ApplyFilter(*this, expr.name, input, args);
    }
    case Expr::Type::kTest: {
      PG_ASSIGN_OR_RETURN(Value input, Eval(*expr.args[0]));
      CallArgs args;
      PG_RETURN_IF_ERROR(EvalArgs(expr, 1, args));
      PG_ASSIGN_OR_RETURN(bool passed, ApplyTest(*this, expr.name, input, args));
      return Value::Bool(passed);
    }
    case Expr::Type::kNeg:
    case Expr::Type::kPos: {
      PG_ASSIGN_OR_RETURN(Value v, Eval(*expr.args[0]));
      if (expr.type == Expr::Type::kPos) {
        if (!v.is_number()) return RuntimeError(expr.line, "bad operand type for unary +");
        return v.kind() == Value::Kind::kFloat ? v : Value::Int(v.as_int());
      }
      return BinaryOp(*this, "-", Value::Int(0), v);
    }
    case Expr::Type::kNot: {
      PG_ASSIGN_OR_RETURN(Value v, Eval(*expr.args[0]));
      return Value::Bool(!Truthy(v));
    }
    case Expr::Type::kBinary: {
      PG_ASSIGN_OR_RETURN(Value a, Eval(*expr.args[0]));
      PG_ASSIGN_OR_RETURN(Value b, Eval(*expr.args[1]));
      return BinaryOp(*this, expr.name, a, b);
    }
    case Expr::Type::kConcat: {
      std::string out;
      for (const ExprPtr& part : expr.args) {
        PG_ASSIGN_OR_RETURN(Value v, Eval(*part));
        PG_ASSIGN_OR_RETURN(std::string s, ToPyStr(v));
        PG_RETURN_IF_ERROR(CheckSize(out.size() + s.size()));
        PG_RETURN_IF_ERROR(Tick(static_cast<int64_t>(s.size() / 64)));
        out += s;
      }
      return Value::String(std::move(out));
    }
    case Expr::Type::kCompare: return EvalCompare(expr);
    case Expr::Type::kAnd:
    case Expr::Type::kOr: {
      PG_ASSIGN_OR_RETURN(Value left, Eval(*expr.args[0]));
      bool short_circuit = expr.type == Expr::Type::kAnd ? !Truthy(left) : Truthy(left);
      if (short_circuit) return left;
      return Eval(*expr.args[1]);
    }
    case Expr::Type::kCondExpr: {
      PG_ASSIGN_OR_RETURN(Value cond, Eval(*expr.args[0]));
      if (Truthy(cond)) return Eval(*expr.args[1]);
      if (expr.args[2] == nullptr) return Value();
      return Eval(*expr.args[2]);
    }
  }
  return RuntimeError(expr.line, "unknown expression");
}

}  // namespace peregrine::chat::jinja
