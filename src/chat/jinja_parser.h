// Recursive-descent parser of the Jinja subset, following Jinja's grammar and operator
// precedence: conditional < or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary
// minus < postfix (. [] ()) < filters and tests.
#pragma once

#include <vector>

#include "base/status.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace peregrine::chat::jinja {

// Statements: if/elif/else, for (tuple targets, inline if, else), set (name, tuple, ns.attr,
// block form), macro, break, continue, generation, plus {% raw %} from the lexer. Anything else
// (include, import, extends, call, filter blocks, ...) is rejected. Nesting deeper than a fixed
// limit is rejected too, so that parsing and rendering recurse a bounded number of times.
Result<NodeList> Parse(const std::vector<Token>& tokens);

}  // namespace peregrine::chat::jinja
