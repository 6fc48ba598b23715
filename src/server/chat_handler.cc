// POST /v1/chat/completions: request -> DeepSeek-V4 prompt -> tokens -> job; and the chat
// response shapes (chat.completion and chat.completion.chunk).
#include <chrono>
#include <string>
#include <utility>

#include "chat/v4_encoder.h"
#include "server/disaggregated_serving.h"
#include "server/generation_route.h"
#include "server/logprobs_format.h"
#include "server/openai_request.h"
#include "server/sse.h"

namespace peregrine::server {
namespace {

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

Json ToolCallDeltaJson(const chat::ToolCallDelta& d) {
  Json call = Json::object();
  call["index"] = d.index;
  Json function = Json::object();
  if (!d.id.empty()) {
    call["id"] = d.id;
    call["type"] = "function";
    function["name"] = d.name;
  }
  function["arguments"] = d.arguments;
  call["function"] = std::move(function);
  return call;
}

class ChatFormatter final : public ResponseFormatter {
 public:
  // `prompt_logprobs` >= 0: vLLM's prompt_logprobs, top-level, from the first choice.
  ChatFormatter(const tokenizer::Tokenizer& tokenizer, std::string id, std::string model,
                size_t num_choices, int top_logprobs, int prompt_logprobs, bool include_usage)
      : tokenizer_(tokenizer), id_(std::move(id)), model_(std::move(model)),
        created_(UnixSeconds()), num_choices_(num_choices), top_logprobs_(top_logprobs),
        prompt_logprobs_(prompt_logprobs), include_usage_(include_usage) {}

  void StreamStart(std::string* out) override {
    for (size_t i = 0; i < num_choices_; ++i) {
      Json choice = {{"index", i},
                     {"delta", {{"role", "assistant"}, {"content", ""}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}};
      AppendSseEvent(Chunk(std::move(choice)), out);
    }
  }

  void StreamUpdate(size_t index, const ChoiceUpdate& update, std::string* out) override {
    Json delta = Json::object();
    const chat::OutputDelta& d = update.delta;
    if (!d.reasoning_content.empty()) delta["reasoning_content"] = d.reasoning_content;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) {
      Json calls = Json::array();
      for (const auto& call : d.tool_calls) calls.push_back(ToolCallDeltaJson(call));
      delta["tool_calls"] = std::move(calls);
    }
    const bool has_logprobs = top_logprobs_ >= 0 && !update.samples.empty();
    // The first choice's first update carries the prompt's scores.
    const bool has_prompt = index == 0 && prompt_logprobs_ >= 0 && !prompt_sent_;
    if (delta.empty() && !has_logprobs && !update.finish_reason && !has_prompt) return;
    Json choice = {{"index", index}, {"delta", std::move(delta)}};
    choice["logprobs"] = has_logprobs ? Logprobs(update.samples) : Json(nullptr);
    choice["finish_reason"] = update.finish_reason ? Json(*update.finish_reason) : Json(nullptr);
    Json chunk = Chunk(std::move(choice));
    if (has_prompt) {
      prompt_sent_ = true;
      chunk["prompt_logprobs"] = PromptLogprobsJson(tokenizer_, update.prompt_logprobs, prompt_logprobs_);
    }
    AppendSseEvent(chunk, out);
  }

  Json UsageChunk(const Usage& usage) override {
    Json chunk = Header("chat.completion.chunk");
    chunk["choices"] = Json::array();
    chunk["usage"] = UsageJson(usage);
    return chunk;
  }

  Json Whole(const std::vector<ChoiceResult>& choices, const Usage& usage) override {
    Json body = Header("chat.completion");
    Json list = Json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
      const ChoiceResult& c = choices[i];
      const chat::ParsedOutput& m = c.message;
      Json message = {{"role", "assistant"}};
      message["content"] =
          m.content.empty() && !m.tool_calls.empty() ? Json(nullptr) : Json(m.content);
      message["reasoning_content"] =
          m.reasoning_content.empty() ? Json(nullptr) : Json(m.reasoning_content);
      if (!m.tool_calls.empty()) {
        Json calls = Json::array();
        for (const chat::ToolCall& call : m.tool_calls) {
          calls.push_back({{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
      }
      Json choice = {{"index", i}, {"message", std::move(message)}};
      choice["logprobs"] = top_logprobs_ >= 0 ? Logprobs(c.samples) : Json(nullptr);
      choice["finish_reason"] = c.finish_reason;
      list.push_back(std::move(choice));
    }
    body["choices"] = std::move(list);
    if (prompt_logprobs_ >= 0 && !choices.empty())
      body["prompt_logprobs"] = PromptLogprobsJson(tokenizer_, choices.front().prompt_logprobs, prompt_logprobs_);
    body["usage"] = UsageJson(usage);
    return body;
  }

 private:
  Json Header(const char* object) const {
    return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
  }
  Json Chunk(Json choice) const {
    Json chunk = Header("chat.completion.chunk");
    chunk["choices"] = Json::array({std::move(choice)});
    if (include_usage_) chunk["usage"] = nullptr;
    return chunk;
  }
  Json Logprobs(const std::vector<SampleResult>& samples) const {
    return {{"content", ChatLogprobsContent(tokenizer_, samples, top_logprobs_)}};
  }
  const tokenizer::Tokenizer& tokenizer_;
  std::string id_;
  std::string model_;
  int64_t created_;
  size_t num_choices_;
  int top_logprobs_;  // -1: no logprobs
  int prompt_logprobs_;
  bool include_usage_;
  bool prompt_sent_ = false;
};

PreparedJob PrepareChat(std::string body, ServingContext& context) {
  PreparedJob out;
  const ParseContext parse_context{&context.config, context.engine.vocab_size()};
  Json json;
  if ((out.error = ParseJsonBody(body, context.config.limits.max_json_depth, &json))) return out;
  body.clear();
  body.shrink_to_fit();
  ChatRequest request;
  if ((out.error = ParseChatRequest(std::move(json), parse_context, &request))) return out;

  Result<std::string> prompt = RenderChatPrompt(request);
  if (!prompt.ok()) {
    out.error = InvalidRequest(prompt.status().message(), "messages");
    return out;
  }
  Result<std::vector<int32_t>> ids = context.tokenizer.Encode(*prompt, /*parse_special=*/true);
  if (!ids.ok()) {
    out.error = InvalidRequest("The prompt could not be tokenized.", "messages");
    return out;
  }
  if ((out.error = CheckPromptIds(*ids, parse_context.vocab_size))) return out;
  GenerationOptions& options = request.options;
  const auto num_prompt = static_cast<int64_t>(ids->size());
  if ((out.error = ResolveMaxTokens(num_prompt, context.engine.max_context(), true,
                                    &options.max_tokens))) {
    return out;
  }

  std::shared_ptr<const structured::CompiledGrammar> grammar;
  if ((out.error = CompileGrammar(context, options.structured, &grammar))) return out;
  // With thinking on, the reasoning stays free: the grammar starts after </think>.
  int32_t grammar_after = -1;
  if (grammar != nullptr && request.thinking) {
    if (auto end = context.tokenizer.SpecialTokenId("</think>"); end.ok()) grammar_after = *end;
  }
  const std::string id = context.NewId("chatcmpl-");
  for (int i = 0; i < options.n; ++i) {
    JobChoice choice;
    choice.request = MakeEngineRequest(id, static_cast<size_t>(i), *ids, options,
                                       *options.max_tokens);
    choice.request.grammar = grammar;
    choice.request.grammar_after = grammar_after;
    if (i > 0) choice.request.prompt_logprobs = -1;  // one choice scores the shared prompt
    choice.decoder.skip_special_tokens = options.skip_special_tokens;
    choice.decoder.stop = options.stop;
    choice.decoder.include_stop = options.include_stop_str_in_output;
    choice.decoder.parser = chat::OutputParserConfig{
        .dialect = chat::ModelDialect::kDeepSeekV4,
        .thinking = request.starts_in_reasoning,
        .has_tools = request.has_tools,
        .tool_call_ids = chat::ToolCallIdGenerator::Random(context.NextRandom())};
    out.spec.choices.push_back(std::move(choice));
  }
  out.spec.prompt_lengths = {num_prompt};
  out.spec.stream = options.stream;
  out.spec.include_usage = options.include_usage;
  if ((out.error = ApplyDisaggregation(context, options, &out.spec))) return out;
  const int top = request.logprobs ? options.sampling.logprobs : -1;
  out.formatter = std::make_unique<ChatFormatter>(context.tokenizer, id, context.config.model_name,
                                                  static_cast<size_t>(options.n), top,
                                                  options.prompt_logprobs, options.include_usage);
  return out;
}

}  // namespace

void HandleChatCompletions(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                           std::shared_ptr<ResponseChannel> channel) {
  ServeGeneration(context, std::move(request), std::move(channel), PrepareChat);
}

}  // namespace peregrine::server
