// SourceLocation: std::source_location's role (the caller's file, line and function as a
// default argument) built on the compiler builtins, which GCC and Clang both provide even
// where the standard library lacks <source_location> (clang 14 with libstdc++ 12, used for
// the libFuzzer builds).
#pragma once

namespace peregrine {

class SourceLocation {
 public:
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          unsigned line = __builtin_LINE(),
                                          const char* function = __builtin_FUNCTION()) {
    return SourceLocation(file, line, function);
  }
  constexpr const char* file_name() const { return file_; }
  constexpr unsigned line() const { return line_; }
  constexpr const char* function_name() const { return function_; }

 private:
  constexpr SourceLocation(const char* file, unsigned line, const char* function)
      : file_(file), line_(line), function_(function) {}

  const char* file_;
  unsigned line_;
  const char* function_;
};

}  // namespace peregrine
