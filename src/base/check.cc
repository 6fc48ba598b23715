#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace peregrine {

void CheckFailed(std::string_view condition, std::string_view message,
                 const ::peregrine::SourceLocation& where) {
  std::fprintf(stderr, "CHECK failed at %s:%u (%s): %.*s %.*s\n", where.file_name(),
               static_cast<unsigned>(where.line()), where.function_name(),
               static_cast<int>(condition.size()), condition.data(), static_cast<int>(message.size()),
               message.data());
  std::abort();
}

}  // namespace peregrine
