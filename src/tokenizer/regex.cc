#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "tokenizer/regex_translate.h"
#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

// Generous: a pattern's JIT stack use grows with nested backtracking, not with input size,
// for every pattern tokenizer files use; the memory is only reserved until touched.
constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = 16 * 1024 * 1024;

std::string Pcre2ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

}  // namespace

struct MatchScratch::Impl {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  ~Impl() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

MatchScratch::MatchScratch() : impl_(std::make_unique<Impl>()) {
  // One ovector pair: callers only need the whole match.
  impl_->data = pcre2_match_data_create(1, nullptr);
  impl_->context = pcre2_match_context_create(nullptr);
  impl_->jit_stack = pcre2_jit_stack_create(kJitStackStart, kJitStackMax, nullptr);
  if (impl_->context != nullptr && impl_->jit_stack != nullptr) {
    pcre2_jit_stack_assign(impl_->context, nullptr, impl_->jit_stack);
  }
}

MatchScratch::~MatchScratch() = default;

Result<Regex::Code> Regex::CompileCode(const std::string& pattern, uint32_t options,
                                       std::string_view source) {
  if (!IsValidUtf8(pattern)) return InvalidArgument("regex pattern is not valid UTF-8");
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    return InvalidArgument("cannot compile regex /" + std::string(source) + "/: " +
                           Pcre2ErrorMessage(error) + " at offset " + std::to_string(offset));
  }
  return Code{code, pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0};
}

void Regex::Free(Code& code) {
  pcre2_code_free(static_cast<pcre2_code*>(code.code));
  code = Code{};
}

Result<Regex> Regex::Compile(std::string_view pattern, Syntax syntax) {
  Regex regex;
  uint32_t options = PCRE2_UTF | PCRE2_UCP;
  std::string fast_pattern;
  switch (syntax) {
    case Syntax::kOniguruma: {
      PG_ASSIGN_OR_RETURN(regex.compiled_pattern_, TranslateOnigurumaPattern(pattern));
      PG_ASSIGN_OR_RETURN(fast_pattern, TranslateOnigurumaPattern(pattern, false));
      options |= PCRE2_MULTILINE;
      break;
    }
    case Syntax::kPcre2:
      regex.compiled_pattern_ = std::string(pattern);
      break;
    case Syntax::kLiteral:
      regex.compiled_pattern_ = std::string(pattern);
      options = PCRE2_UTF | PCRE2_LITERAL;  // PCRE2 rejects UCP with LITERAL; it has no classes
      break;
  }
  PG_ASSIGN_OR_RETURN(regex.exact_, CompileCode(regex.compiled_pattern_, options, pattern));
  if (!fast_pattern.empty() && fast_pattern != regex.compiled_pattern_) {
    PG_ASSIGN_OR_RETURN(regex.fast_, CompileCode(fast_pattern, options, pattern));
  }
  return regex;
}

Regex::Regex(Regex&& other) noexcept
    : exact_(std::exchange(other.exact_, Code{})),
      fast_(std::exchange(other.fast_, Code{})),
      compiled_pattern_(std::move(other.compiled_pattern_)) {}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    Free(exact_);
    Free(fast_);
    exact_ = std::exchange(other.exact_, Code{});
    fast_ = std::exchange(other.fast_, Code{});
    compiled_pattern_ = std::move(other.compiled_pattern_);
  }
  return *this;
}

Regex::~Regex() {
  Free(exact_);
  Free(fast_);
}

Status Regex::FindAll(std::string_view text, MatchScratch& scratch,
                      FunctionRef<void(size_t, size_t)> on_match) const {
  const Code& chosen =
      fast_.code != nullptr && scratch.is_text_delta_free_ ? fast_ : exact_;
  auto* code = static_cast<const pcre2_code*>(chosen.code);
  const bool is_jit = chosen.is_jit;
  MatchScratch::Impl& s = *scratch.impl_;
  if (s.data == nullptr || s.context == nullptr) return ResourceExhausted("regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t size = text.size();
  size_t last_end = 0;
  bool has_last_match = false;
  size_t last_match_end = 0;
  while (last_end <= size) {
    const int rc = is_jit ? pcre2_jit_match(code, subject, size, last_end, PCRE2_NO_UTF_CHECK,
                                             s.data, s.context)
                           : pcre2_match(code, subject, size, last_end, PCRE2_NO_UTF_CHECK,
                                         s.data, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return ResourceExhausted("regex /" + compiled_pattern_ + "/ failed: " +
                               Pcre2ErrorMessage(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (begin == end && has_last_match && last_match_end == end) {
      // Oniguruma's rule: no empty match right after the previous match; step one character.
      last_end += last_end < size ? Utf8SequenceLength(static_cast<uint8_t>(text[last_end])) : 1;
      continue;
    }
    last_end = end;
    has_last_match = true;
    last_match_end = end;
    on_match(begin, end);
  }
  return Status::Ok();
}

}  // namespace peregrine::tokenizer
