// ChoiceDecoder: one choice's output path, from engine tokens to what the client sees:
// streaming detokenizer -> stop strings -> (chat) reasoning / tool-call parser, plus the
// logprobs and the token count. Streaming and whole responses use the same path, so the
// joined stream equals the whole text by construction.
//
// Ownership: one per choice, used on the request's connection thread only; refers to the
// Tokenizer, which outlives the server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "engine/engine_client.h"
#include "tokenizer/stream_decoder.h"
#include "server/stop_matcher.h"

namespace peregrine::server {

struct ChoiceDecoderOptions {
  bool skip_special_tokens = true;
  std::vector<std::string> stop;
  bool include_stop = false;
  std::optional<chat::OutputParserConfig> parser;  // chat requests only
};

// What one engine event adds to a choice.
struct ChoiceUpdate {
  std::string text;                     // new text after stop handling
  chat::OutputDelta delta;              // chat: `text` split into reasoning / content / calls
  std::vector<SampleResult> samples;    // logprobs of the tokens this update covers
  std::vector<SampleResult> prompt_logprobs;  // the prompt's scores (EngineEvent::prompt_logprobs)
  std::optional<std::string> finish_reason;  // "stop", "length", "tool_calls", "abort", "error"
  std::string error;                    // with finish_reason "error"
  bool is_empty() const {
    return text.empty() && delta.is_empty() && samples.empty() && prompt_logprobs.empty() && !finish_reason;
  }
};

class ChoiceDecoder {
 public:
  ChoiceDecoder(const tokenizer::Tokenizer& tokenizer, ChoiceDecoderOptions options);

  // Consumes one engine event; events after the finish are ignored (empty update).
  ChoiceUpdate OnEvent(const EngineEvent& event);

  bool is_finished() const { return is_finished_; }
  // True when a stop string ended the choice: the engine request must be aborted.
  bool is_stopped_by_string() const { return is_stopped_by_string_; }
  int64_t num_tokens() const { return num_tokens_; }
  bool has_tool_calls() const { return has_tool_calls_; }

 private:
  // Runs `piece` through the stop matcher and parser into `update`; true on a stop string.
  bool Emit(std::string_view piece, ChoiceUpdate& update);
  void Finish(std::string reason, ChoiceUpdate& update);

  ChoiceDecoderOptions options_;
  tokenizer::StreamDecoder detokenizer_;
  StopMatcher stop_;
  std::optional<chat::OutputParser> parser_;
  std::string scratch_;
  int64_t num_tokens_ = 0;
  bool is_finished_ = false;
  bool is_stopped_by_string_ = false;
  bool has_tool_calls_ = false;
};

}  // namespace peregrine::server
