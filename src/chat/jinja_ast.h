// Syntax tree of the Jinja subset. Built by the parser, owned by a JinjaTemplate, walked by the
// renderer; immutable after parsing.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace peregrine::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    kConst,     // value
    kName,      // name
    kList,      // args: items
    kTuple,     // args: items
    kDict,      // args: key0, value0, key1, value1, ...
    kGetAttr,   // args[0].name
    kGetItem,   // args[0][args[1]]
    kSlice,     // args: start, stop, step (each may be null); only as kGetItem's index
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs)
    kTest,      // args[0] is name(args[1..], kwargs)
    kNeg,       // -args[0]
    kPos,       // +args[0]
    kNot,       // not args[0]
    kBinary,    // args[0] name args[1], name in + - * / // % **
    kConcat,    // args joined with ~
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    kAnd,       // args[0] and args[1]
    kOr,        // args[0] or args[1]
    kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Type type = Type::kConst;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  enum class Type {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches, else_body
    kFor,       // targets in expr [if filter]: body, else_body
    kSet,       // name [. attr] = expr, or targets = expr
    kSetBlock,  // {% set name %}body{% endset %}
    kMacro,     // name(params = defaults): body
    kBreak,
    kContinue,
    kBlock,     // body rendered in place ({% generation %})
  };
  Type type = Type::kText;
  int line = 0;
  std::string text;                 // kText data; kSet/kSetBlock/kMacro name
  std::string attr;                 // kSet on a namespace attribute
  ExprPtr expr;                     // kOutput, kSet value, kFor iterable
  ExprPtr filter;                   // kFor inline condition
  std::vector<std::string> targets;  // kFor loop variables, kSet tuple targets
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // kIf
  NodeList body;
  NodeList else_body;
  std::vector<std::string> params;  // kMacro
  std::vector<ExprPtr> defaults;    // kMacro, null where a parameter has none
};

}  // namespace peregrine::chat::jinja
