// POST /v1/completions: prompts (text or token ids, batched) -> jobs; and the text_completion
// response shapes.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

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

class CompletionFormatter final : public ResponseFormatter {
 public:
  // How the prompt comes back: `echo[i]` is prepended to every choice of prompt i (empty
  // without echo); with echo_logprobs the prompt's tokens (first_tokens[i] and the engine's
  // scores) lead the choice's logprobs; prompt_logprobs >= 0 adds vLLM's prompt_logprobs.
  struct PromptEcho {
    std::vector<std::string> echo;
    std::vector<int32_t> first_tokens;
    bool echo_logprobs = false;
    int prompt_logprobs = -1;
  };
  // `prompt_of_choice[c]` maps a choice to its prompt.
  CompletionFormatter(const tokenizer::Tokenizer& tokenizer, std::string id, std::string model,
                      PromptEcho prompt, std::vector<size_t> prompt_of_choice,
                      int logprobs, bool include_usage)
      : tokenizer_(tokenizer), id_(std::move(id)), model_(std::move(model)),
        created_(UnixSeconds()), prompt_(std::move(prompt)),
        prompt_of_choice_(std::move(prompt_of_choice)), logprobs_(logprobs),
        include_usage_(include_usage), text_offsets_(prompt_of_choice_.size(), 0),
        started_(prompt_of_choice_.size(), false) {}

  void StreamStart(std::string* out) override {
    // With echo logprobs the echo waits for the prompt's scores (the choice's first update).
    if (prompt_.echo_logprobs) return;
    for (size_t c = 0; c < prompt_of_choice_.size(); ++c) {
      const std::string& echo = prompt_.echo[prompt_of_choice_[c]];
      if (echo.empty()) continue;
      AppendSseEvent(Chunk(Choice(c, echo, Json(nullptr), Json(nullptr))), out);
    }
  }

  void StreamUpdate(size_t index, const ChoiceUpdate& update, std::string* out) override {
    if (!started_[index]) {
      // The engine's first event carries the prompt's scores.
      started_[index] = true;
      const size_t p = prompt_of_choice_[index];
      if (prompt_.echo_logprobs) {
        Json logprobs = nullptr;
        AppendEchoLogprobs(tokenizer_, prompt_.first_tokens[p], update.prompt_logprobs, logprobs_,
                           &text_offsets_[index], &logprobs);
        Json choice = Choice(index, prompt_.echo[p], std::move(logprobs), Json(nullptr));
        AddPromptLogprobs(update.prompt_logprobs, &choice);
        AppendSseEvent(Chunk(std::move(choice)), out);
      } else if (prompt_.prompt_logprobs >= 0) {
        Json choice = Choice(index, "", Json(nullptr), Json(nullptr));
        AddPromptLogprobs(update.prompt_logprobs, &choice);
        AppendSseEvent(Chunk(std::move(choice)), out);
      }
    }
    const bool has_logprobs = logprobs_ >= 0 && !update.samples.empty();
    if (update.text.empty() && !has_logprobs && !update.finish_reason) return;
    Json logprobs = nullptr;
    if (has_logprobs) {
      AppendCompletionLogprobs(tokenizer_, update.samples, logprobs_, &text_offsets_[index],
                               &logprobs);
    }
    Json finish = update.finish_reason ? Json(*update.finish_reason) : Json(nullptr);
    AppendSseEvent(Chunk(Choice(index, update.text, std::move(logprobs), std::move(finish))),
                   out);
  }

  Json UsageChunk(const Usage& usage) override {
    Json chunk = Header();
    chunk["choices"] = Json::array();
    chunk["usage"] = UsageJson(usage);
    return chunk;
  }

  Json Whole(const std::vector<ChoiceResult>& choices, const Usage& usage) override {
    Json body = Header();
    Json list = Json::array();
    for (size_t c = 0; c < choices.size(); ++c) {
      const size_t p = prompt_of_choice_[c];
      Json logprobs = nullptr;
      if (logprobs_ >= 0) {
        int64_t offset = 0;
        if (prompt_.echo_logprobs)
          AppendEchoLogprobs(tokenizer_, prompt_.first_tokens[p], choices[c].prompt_logprobs, logprobs_, &offset,
                             &logprobs);
        AppendCompletionLogprobs(tokenizer_, choices[c].samples, logprobs_, &offset, &logprobs);
      }
      Json choice = Choice(c, prompt_.echo[p] + choices[c].text, std::move(logprobs), Json(choices[c].finish_reason));
      AddPromptLogprobs(choices[c].prompt_logprobs, &choice);
      list.push_back(std::move(choice));
    }
    body["choices"] = std::move(list);
    body["usage"] = UsageJson(usage);
    return body;
  }

 private:
  Json Header() const {
    return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}};
  }
  static Json Choice(size_t index, const std::string& text, Json logprobs, Json finish) {
    return {{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)},
            {"finish_reason", std::move(finish)}};
  }
  void AddPromptLogprobs(const std::vector<SampleResult>& scores, Json* choice) const {
    if (prompt_.prompt_logprobs >= 0)
      (*choice)["prompt_logprobs"] = PromptLogprobsJson(tokenizer_, scores, prompt_.prompt_logprobs);
  }
  Json Chunk(Json choice) const {
    Json chunk = Header();
    chunk["choices"] = Json::array({std::move(choice)});
    if (include_usage_) chunk["usage"] = nullptr;
    return chunk;
  }
  const tokenizer::Tokenizer& tokenizer_;
  std::string id_;
  std::string model_;
  int64_t created_;
  PromptEcho prompt_;
  std::vector<size_t> prompt_of_choice_;
  int logprobs_;  // -1: none
  bool include_usage_;
  std::vector<int64_t> text_offsets_;
  std::vector<bool> started_;  // per choice: its first update went out
};

// max_tokens 0 with echo: the prompts come back and nothing is generated.
HttpResponse EchoOnly(CompletionFormatter& formatter, const CompletionRequest& request,
                      const std::vector<int64_t>& prompt_lengths) {
  Usage usage;
  for (int64_t n : prompt_lengths) usage.prompt_tokens += n;
  std::vector<ChoiceResult> results(request.prompts.size() * static_cast<size_t>(request.options.n));
  for (ChoiceResult& r : results) r.finish_reason = "length";
  HttpResponse response;
  if (!request.options.stream) {
    response.body = DumpJson(formatter.Whole(results, usage));
    return response;
  }
  // A whole SSE body: one echo chunk per choice, the finish, usage, [DONE].
  response.content_type = "text/event-stream";
  formatter.StreamStart(&response.body);
  for (size_t c = 0; c < results.size(); ++c) {
    ChoiceUpdate update;
    update.finish_reason = "length";
    formatter.StreamUpdate(c, update, &response.body);
  }
  if (request.options.include_usage) AppendSseEvent(formatter.UsageChunk(usage), &response.body);
  AppendSseDone(&response.body);
  return response;
}

PreparedJob PrepareCompletion(std::string body, ServingContext& context) {
  PreparedJob out;
  const ParseContext parse_context{&context.config, context.engine.vocab_size()};
  Json json;
  if ((out.error = ParseJsonBody(body, context.config.limits.max_json_depth, &json))) return out;
  body.clear();
  body.shrink_to_fit();
  CompletionRequest request;
  if ((out.error = ParseCompletionRequest(std::move(json), parse_context, &request))) return out;
  GenerationOptions& options = request.options;

  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<int64_t> prompt_lengths;
  CompletionFormatter::PromptEcho echo;
  echo.echo_logprobs = request.echo_logprobs;
  echo.prompt_logprobs = options.prompt_logprobs;
  const int64_t max_context = context.engine.max_context();
  for (CompletionPrompt& prompt : request.prompts) {
    if (prompt.is_text) {
      Result<std::vector<int32_t>> ids =
          context.tokenizer.Encode(prompt.text, /*parse_special=*/true, /*add_special=*/true);
      if (!ids.ok()) {
        out.error = InvalidRequest("The prompt could not be tokenized.", "prompt");
        return out;
      }
      prompt_ids.push_back(std::move(*ids));
      if ((out.error = CheckPromptIds(prompt_ids.back(), parse_context.vocab_size))) return out;
    } else {
      prompt_ids.push_back(std::move(prompt.token_ids));
    }
    std::optional<int64_t> max_tokens = options.max_tokens;
    const auto n = static_cast<int64_t>(prompt_ids.back().size());
    if ((out.error = ResolveMaxTokens(n, max_context, false, &max_tokens))) return out;
    prompt_lengths.push_back(n);
    echo.first_tokens.push_back(prompt_ids.back().front());
    if (request.echo) {
      echo.echo.push_back(prompt.is_text ? std::move(prompt.text)
                                         : context.tokenizer.Decode(prompt_ids.back(),
                                                                    options.skip_special_tokens));
    } else {
      echo.echo.emplace_back();
    }
  }
  // What the engine scores: the larger of the two alternative counts asked for.
  const int32_t scored = std::max(options.prompt_logprobs, request.echo_logprobs ? options.sampling.logprobs : -1);

  const std::string id = context.NewId("cmpl-");
  std::vector<size_t> prompt_of_choice;
  for (size_t p = 0; p < prompt_ids.size(); ++p) {
    for (int i = 0; i < options.n; ++i) prompt_of_choice.push_back(p);
  }
  auto formatter = std::make_unique<CompletionFormatter>(
      context.tokenizer, id, context.config.model_name, std::move(echo), prompt_of_choice,
      options.sampling.logprobs, options.include_usage);
  if (*options.max_tokens == 0 && scored < 0) {
    out.immediate = EchoOnly(*formatter, request, prompt_lengths);
    return out;
  }
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  if ((out.error = CompileGrammar(context, options.structured, &grammar))) return out;
  for (size_t c = 0; c < prompt_of_choice.size(); ++c) {
    JobChoice choice;
    choice.prompt_index = prompt_of_choice[c];
    choice.request = MakeEngineRequest(id, c, prompt_ids[choice.prompt_index], options,
                                       *options.max_tokens);
    choice.request.prompt_logprobs = scored;
    choice.request.grammar = grammar;
    choice.decoder.skip_special_tokens = options.skip_special_tokens;
    choice.decoder.stop = options.stop;
    choice.decoder.include_stop = options.include_stop_str_in_output;
    out.spec.choices.push_back(std::move(choice));
  }
  out.spec.prompt_lengths = std::move(prompt_lengths);
  out.spec.stream = options.stream;
  out.spec.include_usage = options.include_usage;
  if ((out.error = ApplyDisaggregation(context, options, &out.spec))) return out;
  out.formatter = std::move(formatter);
  return out;
}

}  // namespace

void HandleCompletions(const std::shared_ptr<ServingContext>& context, HttpRequest request,
                       std::shared_ptr<ResponseChannel> channel) {
  ServeGeneration(context, std::move(request), std::move(channel), PrepareCompletion);
}

}  // namespace peregrine::server
