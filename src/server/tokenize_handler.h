// POST /tokenize and POST /detokenize in vLLM's shapes. Parsing, rendering and tokenizing run
// on a worker thread (like the generation routes), the answer on the connection thread; no
// admission ticket is taken, since nothing reaches the engine.
//
//   /tokenize   {"model"?, "prompt": str, "add_special_tokens"?: true, "return_token_strs"?}
//            or {"model"?, "messages": [...], "add_generation_prompt"?: true,
//                "continue_final_message"?, "add_special_tokens"?: false, "tools"?, thinking
//                switches as in chat} (the prompt /v1/chat/completions would render)
//            -> {"count", "max_model_len", "tokens", "token_strs": [...] or null}
//   /detokenize {"model"?, "tokens": [ids below the model's vocabulary]} -> {"prompt"}
#pragma once

#include <memory>

#include "server/http_message.h"
#include "server/response_channel.h"
#include "server/serving_context.h"

namespace peregrine::server {

void HandleTokenize(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                    std::shared_ptr<ResponseChannel> channel);
void HandleDetokenize(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                      std::shared_ptr<ResponseChannel> channel);

}  // namespace peregrine::server
