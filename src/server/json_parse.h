// JSON text -> Json (ordered_json) in time linear in the number of object members.
//
// nlohmann's own DOM parse inserts each member of an ordered_json object by a linear search
// for its key, so one object of n members costs O(n^2): 150,000 keys took 18-48 s of a worker
// (on a loaded 2-core machine), against ~0.3 s here.
// This builder appends members directly and finds duplicates through a hash index once an
// object has more than a few members. Semantics are nlohmann's: key order kept, a duplicate
// key keeps its first position and its last value.
#pragma once

#include <optional>
#include <string_view>

#include "server/json_text.h"

namespace peregrine::server {

// nullopt when `text` is not one JSON value (strict RFC 8259). Never throws. Nesting depth is
// the caller's to bound first (the builder keeps one frame per open container).
std::optional<Json> ParseJsonLinear(std::string_view text);

}  // namespace peregrine::server
