#include "tokenizer/tokenizer_json.h"

namespace peregrine::tokenizer {
namespace {

// SAX handler: builds the tree with an explicit stack (no recursion, so deep nesting in a
// hostile file cannot overflow the call stack) and diverts model.vocab / model.merges.
class Handler final : public nlohmann::json_sax<Json> {
 public:
  explicit Handler(TokenizerFile& out) : out_(out) {}

  const std::string& error() const { return error_; }

  bool null() override { return Value(Json(nullptr)); }
  bool boolean(bool v) override { return Value(Json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return VocabId(v);
    return Value(Json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) {
      return VocabId(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
    }
    return Value(Json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return Value(Json(v)); }
  bool binary(binary_t&) override { return Fail("binary values are not JSON"); }

  bool string(string_t& v) override {
    switch (mode_) {
      case Mode::kMerges:
        out_.bpe.merges_are_lines = true;
        if (!out_.bpe.merge_pairs.empty()) return Fail("model.merges mixes lines and pairs");
        out_.bpe.merge_lines.push_back(std::move(v));
        return true;
      case Mode::kMergePair:
        if (pair_size_ == 0) {
          out_.bpe.merge_pairs.back().first = std::move(v);
        } else if (pair_size_ == 1) {
          out_.bpe.merge_pairs.back().second = std::move(v);
        } else {
          return Fail("model.merges pairs must hold two strings");
        }
        ++pair_size_;
        return true;
      case Mode::kVocab:
        return Fail("model.vocab must map strings to integer ids");
      case Mode::kTree:
        return Value(Json(std::move(v)));
    }
    return false;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kTree) return Fail("unexpected object in model.vocab or model.merges");
    if (PathIs("model", "vocab")) {
      mode_ = Mode::kVocab;
      out_.bpe.has_vocab = true;
      out_.bpe.vocab.clear();
      return true;
    }
    return Open(Json::object());
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    key_ = std::move(k);
    return true;
  }

  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kTree;
      return true;
    }
    return Close();
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      if (!out_.bpe.merge_lines.empty()) return Fail("model.merges mixes lines and pairs");
      mode_ = Mode::kMergePair;
      out_.bpe.merge_pairs.emplace_back();
      pair_size_ = 0;
      return true;
    }
    if (mode_ != Mode::kTree) return Fail("model.merges pairs must hold two strings");
    if (PathIs("model", "merges")) {
      mode_ = Mode::kMerges;
      out_.bpe.has_merges = true;
      out_.bpe.merge_lines.clear();
      out_.bpe.merge_pairs.clear();
      return true;
    }
    return Open(Json::array());
  }

  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_size_ != 2) return Fail("model.merges pairs must hold two strings");
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kTree;
      return true;
    }
    return Close();
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception&) override {
    if (error_.empty()) error_ = "tokenizer.json is not valid JSON (near byte " +
                                 std::to_string(position) + ")";
    return false;
  }

 private:
  enum class Mode { kTree, kVocab, kMerges, kMergePair };

  bool Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  // True when the container about to open is root[a][b].
  bool PathIs(std::string_view a, std::string_view b) const {
    return stack_.size() == 2 && stack_[1].second == a && key_ == b && stack_[1].first->is_object();
  }

  bool VocabId(int64_t id) {
    out_.bpe.vocab.emplace_back(std::move(vocab_key_), id);
    return true;
  }

  // Stores a scalar or a new container at the current position; returns its address.
  Json* Place(Json value) {
    if (stack_.empty()) {
      out_.root = std::move(value);
      return &out_.root;
    }
    Json& parent = *stack_.back().first;
    if (parent.is_object()) {
      Json& slot = parent[key_];  // a repeated key keeps the last value, as the reference
      slot = std::move(value);
      return &slot;
    }
    parent.push_back(std::move(value));
    return &parent.back();
  }

  bool Value(Json value) {
    if (mode_ == Mode::kVocab) return Fail("model.vocab must map strings to integer ids");
    if (mode_ != Mode::kTree) return Fail("model.merges entries must be strings or pairs");
    Place(std::move(value));
    return true;
  }

  bool Open(Json container) {
    std::string name = stack_.empty() ? std::string() : key_;
    Json* at = Place(std::move(container));
    stack_.emplace_back(at, std::move(name));
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  TokenizerFile& out_;
  // Open containers with the key each sits under in its parent (used to spot model.vocab).
  std::vector<std::pair<Json*, std::string>> stack_;
  std::string key_;
  std::string vocab_key_;
  Mode mode_ = Mode::kTree;
  int pair_size_ = 0;
  std::string error_;
};

}  // namespace

Result<TokenizerFile> ParseTokenizerJson(std::string_view text) {
  TokenizerFile file;
  Handler handler(file);
  const bool ok = Json::sax_parse(text, &handler);
  if (!ok || !handler.error().empty()) {
    return InvalidArgument(handler.error().empty() ? "tokenizer.json is not valid JSON"
                                                   : handler.error());
  }
  return file;
}

}  // namespace peregrine::tokenizer
