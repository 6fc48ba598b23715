#include "chat/jinja_parser.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

namespace peregrine::chat::jinja {
namespace {

constexpr int kMaxNesting = 200;

using TT = Token::Type;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Result<NodeList> Run() {
    NodeList body;
    PG_RETURN_IF_ERROR(Subparse({}, body));
    if (Cur().type != TT::kEof) return Error("unexpected tag");
    return body;
  }

 private:
  // ---- token stream ----
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Look(size_t ahead = 1) const {
    size_t i = pos_ + ahead;
    return i < tokens_.size() ? tokens_[i] : tokens_.back();
  }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == TT::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const { return Cur().type == TT::kName && Cur().text == name; }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }
  Status Error(const char* reason) const {
    return InvalidArgument("template syntax error at line " + std::to_string(Cur().line) + ": " + reason);
  }
  Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return Error("unexpected token");
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (Cur().type != TT::kName) return Error("expected a name");
    std::string name = Cur().text;
    Next();
    return name;
  }
  Status ExpectBlockEnd() {
    if (Cur().type != TT::kBlockEnd) return Error("expected end of statement block");
    Next();
    return Status::Ok();
  }

  struct DepthGuard {
    explicit DepthGuard(int& depth) : depth_(depth) { ++depth_; }
    ~DepthGuard() { --depth_; }
    int& depth_;
  };
  // Each step of a left-associative chain (a + b + c, x.y[0].z, v|f|g) nests the tree one level
  // deeper without recursing in the parser; count those steps against the same limit.
  struct ChainGuard {
    explicit ChainGuard(Parser& p) : parser(p) {}
    ~ChainGuard() { parser.depth_ -= steps; }
    Status Step() {
      ++steps;
      ++parser.depth_;
      return parser.CheckDepth();
    }
    Parser& parser;
    int steps = 0;
  };
  Status CheckDepth() const { return depth_ > kMaxNesting ? Error("template nests too deeply") : Status::Ok(); }

  ExprPtr MakeExpr(Expr::Type type) const {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = Cur().line;
    return e;
  }
  NodePtr MakeNode(Node::Type type) const {
    auto n = std::make_unique<Node>();
    n->type = type;
    n->line = Cur().line;
    return n;
  }

  // ---- statements ----
  bool AtEndTag(std::initializer_list<std::string_view> names) const {
    if (Cur().type != TT::kBlockBegin || Look().type != TT::kName) return false;
    for (std::string_view n : names)
      if (Look().text == n) return true;
    return false;
  }

  Status Subparse(std::initializer_list<std::string_view> end_names, NodeList& out) {
    DepthGuard guard(depth_);
    PG_RETURN_IF_ERROR(CheckDepth());
    while (true) {
      const Token& t = Cur();
      if (t.type == TT::kEof) {
        if (end_names.size() != 0) return Error("unexpected end of template, a block is not closed");
        return Status::Ok();
      }
      if (t.type == TT::kText) {
        auto node = MakeNode(Node::Type::kText);
        node->text = t.text;
        out.push_back(std::move(node));
        Next();
      } else if (t.type == TT::kVarBegin) {
        Next();
        auto node = MakeNode(Node::Type::kOutput);
        PG_ASSIGN_OR_RETURN(node->expr, ParseTuple(true, false, {}));
        if (Cur().type != TT::kVarEnd) return Error("expected end of print statement");
        Next();
        out.push_back(std::move(node));
      } else if (t.type == TT::kBlockBegin) {
        if (AtEndTag(end_names)) return Status::Ok();
        Next();
        PG_ASSIGN_OR_RETURN(NodePtr node, ParseStatement());
        out.push_back(std::move(node));
      } else {
        return Error("unexpected token");
      }
    }
  }

  // Consumes "{% name" after Subparse stopped at it.
  Result<std::string> TakeEndTag() {
    Next();  // block begin
    return ExpectName();
  }

  Result<NodePtr> ParseStatement() {
    if (Cur().type != TT::kName) return Error("expected a statement name");
    std::string keyword = Cur().text;
    Next();
    if (keyword == "if") return ParseIf();
    if (keyword == "for") return ParseFor();
    if (keyword == "set") return ParseSet();
    if (keyword == "macro") return ParseMacro();
    if (keyword == "break" || keyword == "continue") {
      auto node = MakeNode(keyword == "break" ? Node::Type::kBreak : Node::Type::kContinue);
      PG_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    if (keyword == "generation") {
      auto node = MakeNode(Node::Type::kBlock);
      PG_RETURN_IF_ERROR(ExpectBlockEnd());
      PG_RETURN_IF_ERROR(Subparse({"endgeneration"}, node->body));
      PG_RETURN_IF_ERROR(TakeEndTag().status());
      PG_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    return Error("unsupported or unknown statement");
  }

  Result<NodePtr> ParseIf() {
    auto node = MakeNode(Node::Type::kIf);
    while (true) {
      PG_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, false, {}));
      PG_RETURN_IF_ERROR(ExpectBlockEnd());
      NodeList body;
      PG_RETURN_IF_ERROR(Subparse({"elif", "else", "endif"}, body));
      node->branches.emplace_back(std::move(cond), std::move(body));
      PG_ASSIGN_OR_RETURN(std::string tag, TakeEndTag());
      if (tag == "elif") continue;
      if (tag == "else") {
        PG_RETURN_IF_ERROR(ExpectBlockEnd());
        PG_RETURN_IF_ERROR(Subparse({"endif"}, node->else_body));
        PG_RETURN_IF_ERROR(TakeEndTag().status());
      }
      PG_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
  }

  Result<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> names;
    bool parens = SkipOp("(");
    do {
      PG_ASSIGN_OR_RETURN(std::string name, ExpectName());
      names.push_back(std::move(name));
    } while (SkipOp(",") && Cur().type == TT::kName);
    if (parens) PG_RETURN_IF_ERROR(ExpectOp(")"));
    return names;
  }

  Result<NodePtr> ParseFor() {
    auto node = MakeNode(Node::Type::kFor);
    PG_ASSIGN_OR_RETURN(node->targets, ParseTargets());
    if (!SkipName("in")) return Error("expected 'in' in for loop");
    PG_ASSIGN_OR_RETURN(node->expr, ParseTuple(false, false, {"recursive"}));
    if (SkipName("if")) {
      PG_ASSIGN_OR_RETURN(node->filter, ParseExpression(true));
    }
    if (IsName("recursive")) return Error("recursive loops are not supported");
    PG_RETURN_IF_ERROR(ExpectBlockEnd());
    PG_RETURN_IF_ERROR(Subparse({"endfor", "else"}, node->body));
    PG_ASSIGN_OR_RETURN(std::string tag, TakeEndTag());
    if (tag == "else") {
      PG_RETURN_IF_ERROR(ExpectBlockEnd());
      PG_RETURN_IF_ERROR(Subparse({"endfor"}, node->else_body));
      PG_RETURN_IF_ERROR(TakeEndTag().status());
    }
    PG_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  Result<NodePtr> ParseSet() {
    if (Cur().type == TT::kName && Look().type == TT::kOp && Look().text == ".") {
      auto node = MakeNode(Node::Type::kSet);
      node->text = Cur().text;
      Next();
      Next();
      PG_ASSIGN_OR_RETURN(node->attr, ExpectName());
      PG_RETURN_IF_ERROR(ExpectOp("="));
      PG_ASSIGN_OR_RETURN(node->expr, ParseTuple(true, false, {}));
      PG_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    PG_ASSIGN_OR_RETURN(std::vector<std::string> targets, ParseTargets());
    if (SkipOp("=")) {
      auto node = MakeNode(Node::Type::kSet);
      if (targets.size() == 1) node->text = targets[0];
      else node->targets = std::move(targets);
      PG_ASSIGN_OR_RETURN(node->expr, ParseTuple(true, false, {}));
      PG_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    if (targets.size() != 1) return Error("block set needs a single name");
    auto node = MakeNode(Node::Type::kSetBlock);
    node->text = targets[0];
    PG_RETURN_IF_ERROR(ExpectBlockEnd());
    PG_RETURN_IF_ERROR(Subparse({"endset"}, node->body));
    PG_RETURN_IF_ERROR(TakeEndTag().status());
    PG_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  Result<NodePtr> ParseMacro() {
    auto node = MakeNode(Node::Type::kMacro);
    PG_ASSIGN_OR_RETURN(node->text, ExpectName());
    PG_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!node->params.empty()) PG_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      PG_ASSIGN_OR_RETURN(std::string param, ExpectName());
      ExprPtr def;
      if (SkipOp("=")) {
        PG_ASSIGN_OR_RETURN(def, ParseExpression(true));
      } else if (!node->defaults.empty() && node->defaults.back() != nullptr) {
        return Error("non-default macro parameter follows a default one");
      }
      node->params.push_back(std::move(param));
      node->defaults.push_back(std::move(def));
    }
    Next();
    PG_RETURN_IF_ERROR(ExpectBlockEnd());
    PG_RETURN_IF_ERROR(Subparse({"endmacro"}, node->body));
    PG_RETURN_IF_ERROR(TakeEndTag().status());
    PG_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  // ---- expressions ----
  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = Cur();
    if (t.type == TT::kVarEnd || t.type == TT::kBlockEnd || t.type == TT::kEof) return true;
    if (t.type == TT::kOp && (t.text == ")" || t.text == "]" || t.text == "}" || t.text == "=")) return true;
    if (t.type == TT::kName)
      for (std::string_view n : extra_end)
        if (t.text == n) return true;
    return false;
  }

  Result<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens,
                             std::initializer_list<std::string_view> extra_end) {
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    int line = Cur().line;
    while (true) {
      if (!items.empty()) PG_RETURN_IF_ERROR(ExpectOp(","));
      if (IsTupleEnd(extra_end)) break;
      PG_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
      items.push_back(std::move(item));
      if (IsOp(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return Error("expected an expression");
    }
    auto tuple = MakeExpr(Expr::Type::kTuple);
    tuple->line = line;
    tuple->args = std::move(items);
    return tuple;
  }

  Result<ExprPtr> ParseExpression(bool with_condexpr) {
    DepthGuard guard(depth_);
    PG_RETURN_IF_ERROR(CheckDepth());
    if (!with_condexpr) return ParseOr();
    PG_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    ChainGuard chain(*this);
    while (SkipName("if")) {
      PG_RETURN_IF_ERROR(chain.Step());
      auto cond = MakeExpr(Expr::Type::kCondExpr);
      PG_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        PG_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  Result<ExprPtr> Binary(Expr::Type type, ExprPtr left, ExprPtr right, std::string op = {}) {
    auto e = MakeExpr(type);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  Result<ExprPtr> ParseOr() {
    PG_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    ChainGuard chain(*this);
    while (SkipName("or")) {
      PG_RETURN_IF_ERROR(chain.Step());
      PG_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      PG_ASSIGN_OR_RETURN(left, Binary(Expr::Type::kOr, std::move(left), std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> ParseAnd() {
    PG_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    ChainGuard chain(*this);
    while (SkipName("and")) {
      PG_RETURN_IF_ERROR(chain.Step());
      PG_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      PG_ASSIGN_OR_RETURN(left, Binary(Expr::Type::kAnd, std::move(left), std::move(right)));
    }
    return left;
  }

  Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(depth_);
      PG_RETURN_IF_ERROR(CheckDepth());
      auto e = MakeExpr(Expr::Type::kNot);
      Next();
      PG_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      e->args.push_back(std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    PG_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    auto cmp = MakeExpr(Expr::Type::kCompare);
    cmp->args.push_back(std::move(first));
    while (true) {
      std::string op;
      if (Cur().type == TT::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Look().type == TT::kName && Look().text == "in") {
        op = "notin";
        Next();
        Next();
      } else {
        break;
      }
      PG_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      cmp->ops.push_back(std::move(op));
      cmp->args.push_back(std::move(operand));
    }
    if (cmp->ops.empty()) return std::move(cmp->args[0]);
    return cmp;
  }

  Result<ExprPtr> ParseMath1() {
    PG_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    ChainGuard chain(*this);
    while (IsOp("+") || IsOp("-")) {
      PG_RETURN_IF_ERROR(chain.Step());
      std::string op = Cur().text;
      Next();
      PG_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      PG_ASSIGN_OR_RETURN(left, Binary(Expr::Type::kBinary, std::move(left), std::move(right), op));
    }
    return left;
  }

  Result<ExprPtr> ParseConcat() {
    PG_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
    if (!IsOp("~")) return first;
    auto concat = MakeExpr(Expr::Type::kConcat);
    concat->args.push_back(std::move(first));
    while (SkipOp("~")) {
      PG_ASSIGN_OR_RETURN(ExprPtr next, ParseMath2());
      concat->args.push_back(std::move(next));
    }
    return concat;
  }

  Result<ExprPtr> ParseMath2() {
    PG_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    ChainGuard chain(*this);
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      PG_RETURN_IF_ERROR(chain.Step());
      std::string op = Cur().text;
      Next();
      PG_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      PG_ASSIGN_OR_RETURN(left, Binary(Expr::Type::kBinary, std::move(left), std::move(right), op));
    }
    return left;
  }

  Result<ExprPtr> ParsePow() {
    PG_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    ChainGuard chain(*this);
    while (SkipOp("**")) {
      PG_RETURN_IF_ERROR(chain.Step());
      PG_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      PG_ASSIGN_OR_RETURN(left, Binary(Expr::Type::kBinary, std::move(left), std::move(right), "**"));
    }
    return left;
  }

  Result<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(depth_);
    PG_RETURN_IF_ERROR(CheckDepth());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = MakeExpr(IsOp("-") ? Expr::Type::kNeg : Expr::Type::kPos);
      Next();
      PG_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->args.push_back(std::move(operand));
    } else {
      PG_ASSIGN_OR_RETURN(node, ParsePrimary());
      PG_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    }
    if (with_filter) return ParseFilterExpr(std::move(node));
    return node;
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    if (t.type == TT::kName) {
      auto e = MakeExpr(Expr::Type::kConst);
      if (t.text == "true" || t.text == "True") e->value = Value::Bool(true);
      else if (t.text == "false" || t.text == "False") e->value = Value::Bool(false);
      else if (t.text == "none" || t.text == "None") e->value = Value::None();
      else {
        e->type = Expr::Type::kName;
        e->name = t.text;
      }
      Next();
      return e;
    }
    if (t.type == TT::kString) {
      std::string text;
      while (Cur().type == TT::kString) {  // adjacent literals concatenate
        text += Cur().text;
        Next();
      }
      auto e = MakeExpr(Expr::Type::kConst);
      e->value = Value::String(std::move(text));
      return e;
    }
    if (t.type == TT::kInt || t.type == TT::kFloat) {
      auto e = MakeExpr(Expr::Type::kConst);
      errno = 0;
      if (t.type == TT::kInt) {
        long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) return Error("integer literal out of range");
        e->value = Value::Int(v);
      } else {
        e->value = Value::Float(std::strtod(t.text.c_str(), nullptr));
      }
      Next();
      return e;
    }
    if (SkipOp("(")) {
      PG_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true, true, {}));
      PG_RETURN_IF_ERROR(ExpectOp(")"));
      return inner;
    }
    if (SkipOp("[")) {
      auto list = MakeExpr(Expr::Type::kList);
      while (!IsOp("]")) {
        if (!list->args.empty()) PG_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
        PG_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
        list->args.push_back(std::move(item));
      }
      Next();
      return list;
    }
    if (SkipOp("{")) {
      auto dict = MakeExpr(Expr::Type::kDict);
      while (!IsOp("}")) {
        if (!dict->args.empty()) PG_RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
        PG_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
        PG_RETURN_IF_ERROR(ExpectOp(":"));
        PG_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        dict->args.push_back(std::move(key));
        dict->args.push_back(std::move(value));
      }
      Next();
      return dict;
    }
    return Error("unexpected token in expression");
  }

  Result<ExprPtr> ParsePostfix(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      PG_RETURN_IF_ERROR(chain.Step());
      if (IsOp(".") || IsOp("[")) {
        PG_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        PG_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), Expr::Type::kCall, ""));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseFilterExpr(ExprPtr node) {
    ChainGuard chain(*this);
    while (true) {
      PG_RETURN_IF_ERROR(chain.Step());
      if (IsOp("|")) {
        Next();
        PG_ASSIGN_OR_RETURN(std::string name, ExpectName());
        if (IsOp("(")) {
          PG_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), Expr::Type::kFilter, name));
        } else {
          auto f = MakeExpr(Expr::Type::kFilter);
          f->name = std::move(name);
          f->args.push_back(std::move(node));
          node = std::move(f);
        }
      } else if (IsName("is")) {
        PG_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        PG_ASSIGN_OR_RETURN(node, ParseCall(std::move(node), Expr::Type::kCall, ""));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseTest(ExprPtr node) {
    Next();  // "is"
    bool negated = SkipName("not");
    PG_ASSIGN_OR_RETURN(std::string name, ExpectName());
    ExprPtr test;
    if (IsOp("(")) {
      PG_ASSIGN_OR_RETURN(test, ParseCall(std::move(node), Expr::Type::kTest, name));
    } else {
      test = MakeExpr(Expr::Type::kTest);
      test->name = std::move(name);
      test->args.push_back(std::move(node));
      const Token& t = Cur();
      bool starts_arg = t.type == TT::kName || t.type == TT::kString || t.type == TT::kInt ||
                        t.type == TT::kFloat || (t.type == TT::kOp && (t.text == "(" || t.text == "[" || t.text == "{"));
      if (starts_arg && !IsName("else") && !IsName("or") && !IsName("and")) {
        if (IsName("is")) return Error("tests cannot be chained with is");
        PG_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        PG_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        test->args.push_back(std::move(arg));
      }
    }
    if (!negated) return test;
    auto negation = MakeExpr(Expr::Type::kNot);
    negation->args.push_back(std::move(test));
    return negation;
  }

  // Parses "(args)" after `node`; for filters and tests `node` becomes args[0].
  Result<ExprPtr> ParseCall(ExprPtr node, Expr::Type type, std::string name) {
    DepthGuard guard(depth_);
    PG_RETURN_IF_ERROR(CheckDepth());
    PG_RETURN_IF_ERROR(ExpectOp("("));
    auto call = MakeExpr(type);
    call->name = std::move(name);
    call->args.push_back(std::move(node));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) PG_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) return Error("star arguments are not supported");
      if (Cur().type == TT::kName && Look().type == TT::kOp && Look().text == "=") {
        std::string key = Cur().text;
        Next();
        Next();
        PG_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!call->kwargs.empty()) return Error("positional argument follows keyword argument");
        PG_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->args.push_back(std::move(value));
      }
    }
    Next();
    return call;
  }

  Result<ExprPtr> ParseSubscript(ExprPtr node) {
    if (SkipOp(".")) {
      if (Cur().type == TT::kName) {
        auto e = MakeExpr(Expr::Type::kGetAttr);
        e->name = Cur().text;
        Next();
        e->args.push_back(std::move(node));
        return e;
      }
      if (Cur().type == TT::kInt) {
        auto e = MakeExpr(Expr::Type::kGetItem);
        auto index = MakeExpr(Expr::Type::kConst);
        index->value = Value::Int(std::strtoll(Cur().text.c_str(), nullptr, 10));
        Next();
        e->args.push_back(std::move(node));
        e->args.push_back(std::move(index));
        return e;
      }
      return Error("expected a name or number after '.'");
    }
    Next();  // "["
    std::vector<ExprPtr> items;
    while (!IsOp("]")) {
      if (!items.empty()) PG_RETURN_IF_ERROR(ExpectOp(","));
      PG_ASSIGN_OR_RETURN(ExprPtr item, ParseSubscribed());
      items.push_back(std::move(item));
    }
    Next();
    if (items.empty()) return Error("expected a subscript");
    auto e = MakeExpr(Expr::Type::kGetItem);
    e->args.push_back(std::move(node));
    if (items.size() == 1) {
      e->args.push_back(std::move(items[0]));
    } else {
      auto tuple = MakeExpr(Expr::Type::kTuple);
      tuple->args = std::move(items);
      e->args.push_back(std::move(tuple));
    }
    return e;
  }

  Result<ExprPtr> ParseSubscribed() {
    ExprPtr start;
    if (!IsOp(":")) {
      PG_ASSIGN_OR_RETURN(start, ParseExpression(true));
      if (!IsOp(":")) return start;
    }
    Next();  // ":"
    auto slice = MakeExpr(Expr::Type::kSlice);
    slice->args.push_back(std::move(start));
    ExprPtr stop;
    ExprPtr step;
    if (!IsOp("]") && !IsOp(",") && !IsOp(":")) {
      PG_ASSIGN_OR_RETURN(stop, ParseExpression(true));
    }
    if (SkipOp(":") && !IsOp("]") && !IsOp(",")) {
      PG_ASSIGN_OR_RETURN(step, ParseExpression(true));
    }
    slice->args.push_back(std::move(stop));
    slice->args.push_back(std::move(step));
    return slice;
  }

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<NodeList> Parse(const std::vector<Token>& tokens) {
  if (tokens.empty()) return InvalidArgument("template syntax error at line 1: no tokens");
  return Parser(tokens).Run();
}

}  // namespace peregrine::chat::jinja
