// Server-sent events framing: `data: <json>\n\n` per event and the final `data: [DONE]\n\n`.
#pragma once

#include <string>

#include "server/json_text.h"

namespace peregrine::server {

inline void AppendSseEvent(const Json& event, std::string* out) {
  out->append("data: ");
  out->append(DumpJson(event));
  out->append("\n\n");
}

inline void AppendSseDone(std::string* out) { out->append("data: [DONE]\n\n"); }

}  // namespace peregrine::server
