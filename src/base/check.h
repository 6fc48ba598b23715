// PG_CHECK: for broken invariants only (never for bad input, which is a Status).
#pragma once

#include "base/source_location.h"
#include <string_view>

namespace peregrine {

[[noreturn]] void CheckFailed(std::string_view condition, std::string_view message,
                              const ::peregrine::SourceLocation& where);

}  // namespace peregrine

#define PG_CHECK(cond, ...)                                                          \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::peregrine::CheckFailed(#cond, std::string_view{__VA_ARGS__},                 \
                               ::peregrine::SourceLocation::current());                     \
  } while (0)
