// Internal: the tree-walking renderer of the Jinja subset and the interface its builtins
// (filters, tests, methods, global functions) use. One Interpreter renders one template once,
// on one thread; every loop step, node and builtin draws on a step budget, so no template can run
// for long, and every string it builds is held to the output size limit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_template.h"
#include "chat/jinja_value.h"

namespace peregrine::chat::jinja {

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index`, else the keyword `name`, else undefined.
  Value Get(size_t index, std::string_view name) const;
};

class Interpreter {
 public:
  explicit Interpreter(const JinjaLimits& limits) : limits_(limits) {}

  // Renders `body` with `globals` as the outermost scope.
  Status Run(const NodeList& body, std::unordered_map<std::string, Value> globals, std::string& out);

  // Charges `cost` steps; kResourceExhausted once the budget is spent.
  Status Tick(int64_t cost = 1);
  // kResourceExhausted when a string of `bytes` would pass the output size limit.
  Status CheckSize(size_t bytes) const;

  Result<Value> Call(const Value& callee, const CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  // Scopes hold few names, so a vector beats a hash map (a loop pushes one per iteration).
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    const Value* Find(const std::string& name) const;
    void Set(const std::string& name, Value value);
  };

  Result<Flow> Exec(const NodeList& body, std::string& out);
  Result<Flow> ExecNode(const Node& node, std::string& out);
  Result<Flow> ExecFor(const Node& node, std::string& out);
  Status ExecSet(const Node& node);
  Status Append(std::string& out, std::string_view text);

  Result<Value> Eval(const Expr& expr);
  Result<Value> EvalCompare(const Expr& expr);
  Result<Value> EvalSubscript(const Expr& expr);
  Status EvalArgs(const Expr& expr, size_t first, CallArgs& args);
  Result<Value> CallMacro(const Node& macro, const CallArgs& args);

  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value value);

  const JinjaLimits& limits_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Frame> frames_;
};

}  // namespace peregrine::chat::jinja
