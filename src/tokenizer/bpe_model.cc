#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <span>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

// Merges as pairs; "a b" lines are split at their one space ("#version" lines skipped).
Result<std::vector<std::pair<std::string, std::string>>> MergePairs(BpeTables& tables) {
  if (!tables.merges_are_lines) return std::move(tables.merge_pairs);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(tables.merge_lines.size());
  for (const std::string& line : tables.merge_lines) {
    if (line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      return InvalidArgument("model.merges line " + std::to_string(out.size() + 1) +
                             " must be two tokens separated by one space");
    }
    out.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return out;
}

}  // namespace

Result<BpeModel> BpeModel::Build(const Json& j, BpeTables tables, bool is_byte_level) {
  PG_ASSIGN_OR_RETURN(const std::string type, GetType(j, "model"));
  if (type != "BPE") {
    return Unimplemented("model type '" + type + "' is not supported (only BPE)");
  }
  if (const Json* dropout = FindMember(j, "dropout")) {
    if (!dropout->is_number()) return InvalidArgument("model.dropout must be a number");
    const double p = dropout->get<double>();
    if (!(p >= 0.0 && p <= 1.0)) return InvalidArgument("model.dropout must be in [0, 1]");
    if (p != 0.0) return Unimplemented("BPE dropout is random; only null or 0 is supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const Json* v = FindMember(j, key)) {
      if (!v->is_string()) return InvalidArgument(std::string("model.") + key + " must be a string");
      if (!v->get_ref<const std::string&>().empty()) {
        return Unimplemented(std::string("BPE ") + key + " is not supported");
      }
    }
  }
  BpeModel model;
  model.is_byte_level_ = is_byte_level;
  PG_ASSIGN_OR_RETURN(model.ignore_merges_, GetBool(j, "ignore_merges", "model", false));
  PG_ASSIGN_OR_RETURN(model.byte_fallback_, GetBool(j, "byte_fallback", "model", false));
  PG_ASSIGN_OR_RETURN(model.fuse_unk_, GetBool(j, "fuse_unk", "model", false));
  if (FindMember(j, "unk_token") != nullptr) {
    PG_ASSIGN_OR_RETURN(model.unk_token_, GetString(j, "unk_token", "model"));
  }

  if (!tables.has_vocab || !tables.has_merges) return InvalidArgument("Missing vocab/merges");
  model.vocab_.reserve(tables.vocab.size());
  for (auto& [token, id] : tables.vocab) {
    if (id < 0 || id > kMaxTokenId) {
      return InvalidArgument("model.vocab['" + token + "'] = " + std::to_string(id) +
                             " is outside [0, " + std::to_string(kMaxTokenId) + "]");
    }
    model.vocab_[std::move(token)] = static_cast<int32_t>(id);  // a repeated key: last wins
  }
  for (const auto& [token, id] : model.vocab_) {
    const auto index = static_cast<size_t>(id);
    if (index >= model.id_to_token_.size()) {
      model.id_to_token_.resize(index + 1);
      model.has_id_.resize(index + 1);
    }
    // Two strings with one id: keep the smaller string so loading is deterministic.
    if (!model.has_id_[index] || token < model.id_to_token_[index]) {
      model.id_to_token_[index] = token;
      model.has_id_[index] = true;
    }
  }

  PG_ASSIGN_OR_RETURN(const auto merges, MergePairs(tables));
  model.merges_ = MergeTable(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = model.vocab_.find(a);
    const auto ib = model.vocab_.find(b);
    if (ia == model.vocab_.end()) return InvalidArgument("merge token '" + a + "' is not in vocab");
    if (ib == model.vocab_.end()) return InvalidArgument("merge token '" + b + "' is not in vocab");
    joined.assign(a).append(b);
    const auto merged = model.vocab_.find(joined);
    if (merged == model.vocab_.end()) {
      return InvalidArgument("merge result '" + joined + "' is not in vocab");
    }
    model.merges_.Insert(ia->second, ib->second, static_cast<uint32_t>(rank), merged->second);
  }

  if (is_byte_level) {
    model.has_all_bytes_ = true;
    for (int b = 0; b < 256; ++b) {
      std::string symbol;
      AppendUtf8(ByteLevelCodePoint(static_cast<uint8_t>(b)), symbol);
      const auto it = model.vocab_.find(symbol);
      model.byte_ids_[static_cast<size_t>(b)] = it == model.vocab_.end() ? -1 : it->second;
      if (it == model.vocab_.end()) model.has_all_bytes_ = false;
    }
    if (model.ignore_merges_) {
      for (const auto& [token, id] : model.vocab_) {
        if (auto bytes = ByteLevelToBytes(token)) model.byte_vocab_.emplace(std::move(*bytes), id);
      }
    }
  }
  return model;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= has_id_.size() || !has_id_[static_cast<size_t>(id)]) {
    return nullptr;
  }
  return &id_to_token_[static_cast<size_t>(id)];
}

Status BpeModel::AddUnknown(std::string_view key, size_t num_bytes, BpeScratch& scratch,
                            std::optional<std::pair<int32_t, size_t>>& pending_unk) const {
  if (byte_fallback_) {
    // Each UTF-8 byte of the symbol as a <0xXX> token, if all exist. Like the reference, a
    // pending unk is not flushed first.
    const size_t mark = scratch.symbols.size();
    bool complete = true;
    for (const char c : key) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned>(static_cast<uint8_t>(c)));
      const auto it = vocab_.find(std::string_view(name));
      if (it == vocab_.end()) {
        complete = false;
        break;
      }
      scratch.symbols.push_back(it->second);
    }
    if (complete) return Status::Ok();
    scratch.symbols.resize(mark);
  }
  if (!unk_token_) return Status::Ok();  // no unk: the symbol is dropped, as the reference does
  const auto it = vocab_.find(*unk_token_);
  if (it == vocab_.end()) {
    return InvalidArgument("unk_token '" + *unk_token_ + "' is not in the vocabulary");
  }
  if (pending_unk && fuse_unk_) {
    pending_unk->second += num_bytes;
  } else {
    if (pending_unk) scratch.symbols.push_back(pending_unk->first);
    pending_unk.emplace(it->second, num_bytes);
  }
  return Status::Ok();
}

Status BpeModel::BuildSymbols(std::string_view word, BpeScratch& scratch) const {
  auto& symbols = scratch.symbols;
  symbols.clear();
  if (is_byte_level_ && has_all_bytes_) {
    for (const char c : word) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    return Status::Ok();
  }
  std::optional<std::pair<int32_t, size_t>> pending_unk;
  size_t pos = 0;
  while (pos < word.size()) {
    // The symbol's vocabulary key: one byte's alphabet character, or one UTF-8 character.
    size_t num_bytes;
    int32_t id = -1;
    std::string& key = scratch.key;
    key.clear();
    if (is_byte_level_) {
      num_bytes = 1;
      id = byte_ids_[static_cast<uint8_t>(word[pos])];
      AppendUtf8(ByteLevelCodePoint(static_cast<uint8_t>(word[pos])), key);
    } else {
      num_bytes = Utf8SequenceLength(static_cast<uint8_t>(word[pos]));
      key.assign(word.substr(pos, num_bytes));
      const auto it = vocab_.find(key);
      if (it != vocab_.end()) id = it->second;
    }
    pos += num_bytes;
    if (id >= 0) {
      if (pending_unk) {
        symbols.push_back(pending_unk->first);
        pending_unk.reset();
      }
      symbols.push_back(id);
    } else {
      PG_RETURN_IF_ERROR(AddUnknown(key, num_bytes, scratch, pending_unk));
    }
  }
  if (pending_unk) symbols.push_back(pending_unk->first);
  return Status::Ok();
}

Status BpeModel::Tokenize(std::string_view word, BpeScratch& scratch,
                          std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const auto& map = is_byte_level_ ? byte_vocab_ : vocab_;
    const auto it = map.find(word);
    if (it != map.end()) {
      out.push_back(it->second);
      return Status::Ok();
    }
  }
  const uint64_t hash = WordCache::Hash(word);
  size_t num_ids = 0;
  if (const int32_t* ids = scratch.cache.Find(word, hash, &num_ids)) {
    out.insert(out.end(), ids, ids + num_ids);
    return Status::Ok();
  }
  PG_RETURN_IF_ERROR(BuildSymbols(word, scratch));
  MergeWord(merges_, scratch.symbols, scratch.merge);
  scratch.cache.Insert(word, hash, scratch.symbols);
  out.insert(out.end(), scratch.symbols.begin(), scratch.symbols.end());
  return Status::Ok();
}

}  // namespace peregrine::tokenizer
