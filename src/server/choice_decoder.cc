#include "server/choice_decoder.h"

#include <utility>

namespace peregrine::server {
namespace {

void Merge(chat::OutputDelta&& from, chat::OutputDelta& into) {
  into.reasoning_content += from.reasoning_content;
  into.content += from.content;
  for (auto& call : from.tool_calls) into.tool_calls.push_back(std::move(call));
}

const char* ReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

}  // namespace

ChoiceDecoder::ChoiceDecoder(const tokenizer::Tokenizer& tokenizer, ChoiceDecoderOptions options)
    : options_(std::move(options)),
      detokenizer_(tokenizer, options_.skip_special_tokens),
      stop_(options_.stop, options_.include_stop) {
  if (options_.parser) parser_.emplace(*options_.parser);
}

bool ChoiceDecoder::Emit(std::string_view piece, ChoiceUpdate& update) {
  if (piece.empty()) return false;
  scratch_.clear();
  const bool stopped = stop_.Feed(piece, scratch_);
  if (!scratch_.empty()) {
    update.text += scratch_;
    if (parser_) Merge(parser_->Feed(scratch_), update.delta);
  }
  return stopped;
}

void ChoiceDecoder::Finish(std::string reason, ChoiceUpdate& update) {
  is_finished_ = true;
  if (parser_) {
    Merge(parser_->Finish(), update.delta);
    if (!update.delta.tool_calls.empty()) has_tool_calls_ = true;
    if (has_tool_calls_ && reason == "stop") reason = "tool_calls";
  }
  update.finish_reason = std::move(reason);
}

ChoiceUpdate ChoiceDecoder::OnEvent(const EngineEvent& event) {
  ChoiceUpdate update;
  if (is_finished_) return update;
  update.prompt_logprobs = event.prompt_logprobs;
  const size_t num = event.token_ids.size();
  std::string piece;
  for (size_t i = 0; i < num; ++i) {
    ++num_tokens_;
    if (i < event.samples.size()) update.samples.push_back(event.samples[i]);
    // The token that ended the request with kStop (EOS or a stop id) is not part of the text.
    const bool is_stop_token = event.finish == FinishReason::kStop && i + 1 == num;
    if (is_stop_token) continue;
    piece.clear();
    detokenizer_.Push(event.token_ids[i], piece);
    if (Emit(piece, update)) {
      is_stopped_by_string_ = true;
      Finish("stop", update);
      if (!update.delta.tool_calls.empty()) has_tool_calls_ = true;
      return update;
    }
  }
  if (parser_ && !update.delta.tool_calls.empty()) has_tool_calls_ = true;
  if (!event.finish) return update;

  piece.clear();
  detokenizer_.Flush(piece);
  if (Emit(piece, update)) {
    is_stopped_by_string_ = true;
    Finish("stop", update);
    return update;
  }
  scratch_.clear();
  stop_.Finish(scratch_);
  if (!scratch_.empty()) {
    update.text += scratch_;
    if (parser_) Merge(parser_->Feed(scratch_), update.delta);
  }
  if (*event.finish == FinishReason::kError) update.error = event.error;
  Finish(ReasonName(*event.finish), update);
  return update;
}

}  // namespace peregrine::server
