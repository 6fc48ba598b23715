#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode_delta.h"
#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {

struct Tokenizer::State {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedVocabulary added;
  PostProcessor post_processor;
  // Per id below id_limit: the decoder's bytes, and whether skip_special_tokens drops it.
  std::vector<std::string> token_bytes;
  std::vector<bool> is_special;
  size_t vocab_size = 0;
};

namespace {

// Everything one Encode call mutates. Pooled, so each is used by one thread at a time.
struct EncodeScratch {
  PreTokenizerScratch pre;  // its MatchScratch serves every regex of the call
  BpeScratch bpe;
  std::string repaired;
  std::string normalized;
};

Status CheckDecoder(const Json* decoder) {
  if (decoder == nullptr) return Unimplemented("a tokenizer without a decoder is not supported");
  PG_ASSIGN_OR_RETURN(const std::string type, GetType(*decoder, "decoder"));
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    const Json* list = FindMember(*decoder, "decoders");
    if (list == nullptr || !list->is_array()) {
      return InvalidArgument("decoder Sequence needs a 'decoders' array");
    }
    if (list->size() == 1) return CheckDecoder(&(*list)[0]);
  }
  return Unimplemented("decoder type '" + type + "' is not supported (only ByteLevel)");
}

}  // namespace

class Tokenizer::ScratchPool {
 public:
  std::unique_ptr<EncodeScratch> Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        auto s = std::move(free_.back());
        free_.pop_back();
        return s;
      }
    }
    return std::make_unique<EncodeScratch>();
  }

  void Release(std::unique_ptr<EncodeScratch> s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kMaxPooled) free_.push_back(std::move(s));
  }

 private:
  static constexpr size_t kMaxPooled = 32;
  std::mutex mu_;
  std::vector<std::unique_ptr<EncodeScratch>> free_;
};

Tokenizer::Tokenizer(std::unique_ptr<State> state)
    : state_(std::move(state)), pool_(std::make_unique<ScratchPool>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::FromFile(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, ec)) file /= "tokenizer.json";
  if (!std::filesystem::is_regular_file(file, ec)) {
    return NotFound("tokenizer file not found: " + file.string());
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return NotFound("cannot open " + file.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return DataLoss("cannot read " + file.string());
  Result<Tokenizer> t = FromJson(buffer.str());
  if (!t.ok()) return Status(t.status().code(), file.string() + ": " + t.status().message());
  return t;
}

Result<Tokenizer> Tokenizer::FromJson(std::string_view json) {
  PG_ASSIGN_OR_RETURN(TokenizerFile file, ParseTokenizerJson(json));
  const Json& root = file.root;
  if (!root.is_object()) return InvalidArgument("tokenizer.json must hold an object");
  if (const Json* version = FindMember(root, "version")) {
    if (!version->is_string() || version->get<std::string>() != "1.0") {
      return InvalidArgument("unknown tokenizer.json version (expected \"1.0\")");
    }
  }
  const Json kNull;
  auto member = [&](std::string_view key) -> const Json& {
    const Json* v = FindMember(root, key);
    return v == nullptr ? kNull : *v;
  };
  const Json* model_json = FindMember(root, "model");
  if (model_json == nullptr) return InvalidArgument("tokenizer.json has no model");
  PG_RETURN_IF_ERROR(CheckDecoder(FindMember(root, "decoder")));

  auto state = std::make_unique<State>();
  PG_ASSIGN_OR_RETURN(state->normalizer, Normalizer::FromJson(member("normalizer")));
  PG_ASSIGN_OR_RETURN(state->pre_tokenizer, PreTokenizer::FromJson(member("pre_tokenizer")));
  PG_ASSIGN_OR_RETURN(state->model, BpeModel::Build(*model_json, std::move(file.bpe),
                                                    state->pre_tokenizer.is_byte_level()));
  PG_ASSIGN_OR_RETURN(state->added, AddedVocabulary::Build(member("added_tokens"), state->model,
                                                           state->normalizer));
  PG_ASSIGN_OR_RETURN(state->post_processor, PostProcessor::FromJson(member("post_processor")));

  if (state->post_processor.max_id() >= std::max(state->model.id_limit(), state->added.id_limit())) {
    return InvalidArgument("post_processor template uses id " +
                           std::to_string(state->post_processor.max_id()) + ", which has no token");
  }
  // Decoder table: the ByteLevel decoder maps a token's characters back to bytes when all
  // of them are in the byte alphabet, and keeps the token's UTF-8 otherwise.
  const int32_t limit = std::max(state->model.id_limit(), state->added.id_limit());
  state->token_bytes.resize(static_cast<size_t>(limit));
  state->is_special.resize(static_cast<size_t>(limit));
  Tokenizer probe(std::move(state));
  State& s = *probe.state_;
  for (int32_t id = 0; id < limit; ++id) {
    const std::optional<std::string_view> token = probe.IdToToken(id);
    if (!token) continue;
    std::optional<std::string> bytes = ByteLevelToBytes(*token);
    s.token_bytes[static_cast<size_t>(id)] = bytes ? std::move(*bytes) : std::string(*token);
    s.is_special[static_cast<size_t>(id)] = s.added.IsSpecialContent(*token);
  }
  // Distinct strings: model entries plus added contents the model does not already have.
  s.vocab_size = s.model.vocab_size() + s.added.size() - s.added.num_in_model();
  return probe;
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool parse_special,
                                               bool add_special_tokens) const {
  const State& s = *state_;
  std::unique_ptr<EncodeScratch> scratch = pool_->Acquire();
  EncodeScratch& sc = *scratch;
  if (!IsValidUtf8(text)) {
    sc.repaired.clear();
    AppendUtf8Lossy(text, /*is_final=*/true, sc.repaired);
    text = sc.repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  MatchScratch& match = sc.pre.match;
  // Every span matched below is a piece of `text` or of its normalization.
  match.set_is_text_delta_free(!ContainsUnicodeDelta(text) &&
                                !s.normalizer.can_insert_unicode_delta());

  auto on_word = [&](std::string_view word) { return s.model.Tokenize(word, sc.bpe, ids); };
  auto on_normalized = [&](std::string_view normalized) {
    return [&, normalized](const AddedVocabulary::Segment& seg) -> Status {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        return Status::Ok();
      }
      return s.pre_tokenizer.Run(normalized.substr(seg.begin, seg.end - seg.begin), sc.pre,
                                 on_word);
    };
  };
  Status status = s.added.Split(
      text, AddedVocabulary::Pass::kRaw, parse_special, match,
      [&](const AddedVocabulary::Segment& seg) -> Status {
        if (seg.id >= 0) {
          ids.push_back(seg.id);
          return Status::Ok();
        }
        std::string_view span = text.substr(seg.begin, seg.end - seg.begin);
        if (span.empty()) return Status::Ok();
        if (!s.normalizer.is_identity()) {
          PG_RETURN_IF_ERROR(s.normalizer.Apply(span, match, sc.normalized));
          span = sc.normalized;
        }
        auto visit = on_normalized(span);
        return s.added.Split(span, AddedVocabulary::Pass::kNormalized, parse_special, match,
                             visit);
      });
  match.set_is_text_delta_free(false);
  pool_->Release(std::move(scratch));
  if (!status.ok()) return status;
  if (add_special_tokens) s.post_processor.Apply(ids);
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (skip_special_tokens && IsSpecial(id)) continue;
    bytes.append(TokenBytes(id));
  }
  if (IsValidUtf8(bytes)) return bytes;
  std::string text;
  text.reserve(bytes.size() + 16);
  AppendUtf8Lossy(bytes, /*is_final=*/true, text);
  return text;
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= id_limit()) return {};
  return state_->token_bytes[static_cast<size_t>(id)];
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < id_limit() && state_->is_special[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto id = state_->added.TokenToId(token)) return id;
  return state_->model.TokenToId(token);
}

std::optional<std::string_view> Tokenizer::IdToToken(int32_t id) const {
  if (state_->added.FindById(id) != nullptr) return state_->added.DecodeContent(id);
  if (const std::string* token = state_->model.IdToToken(id)) return std::string_view(*token);
  return std::nullopt;
}

Result<int32_t> Tokenizer::SpecialTokenId(std::string_view content) const {
  if (auto id = state_->added.TokenToId(content)) return *id;
  return NotFound("no added token '" + std::string(content) + "'");
}

size_t Tokenizer::vocab_size() const { return state_->vocab_size; }

int32_t Tokenizer::id_limit() const { return static_cast<int32_t>(state_->token_bytes.size()); }

}  // namespace peregrine::tokenizer
