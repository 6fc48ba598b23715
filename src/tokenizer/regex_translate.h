// Rewrites the Oniguruma (Ruby syntax) patterns that HF `tokenizers` compiles into PCRE2
// patterns with the same matches on UTF-8 text.
//
// What changes: general-category classes (\p{L}, \d, \w, ...) gain the characters assigned
// after PCRE2's Unicode tables (see unicode_delta.h); \s becomes Unicode White_Space; \h, \H,
// \v, \uHHHH, (?m) and {,n} take their Oniguruma meanings. Constructs PCRE2 cannot express
// the same way (nested classes, class intersection, negated categories inside a class, the
// absent operator) are rejected with kUnimplemented rather than approximated.
// Known residual differences: script and binary properties (\p{Han}, \p{Alphabetic}) and
// \b use PCRE2's Unicode 14 tables.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace peregrine::tokenizer {

// The returned pattern expects PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE (Ruby's ^ and $ are
// line anchors). Without `with_unicode_delta` the newer characters are left out: the result
// then matches the same as the full translation on any text for which
// ContainsUnicodeDelta() is false, and runs faster (fewer class items to test).
Result<std::string> TranslateOnigurumaPattern(std::string_view pattern,
                                              bool with_unicode_delta = true);

}  // namespace peregrine::tokenizer
