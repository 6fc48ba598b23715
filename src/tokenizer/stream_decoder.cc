#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {

void StreamDecoder::Push(int32_t id, std::string& out) {
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return;
  const std::string_view bytes = tokenizer_->TokenBytes(id);
  if (bytes.empty()) return;
  if (pending_.empty()) {
    const size_t used = AppendUtf8Lossy(bytes, /*is_final=*/false, out);
    pending_.assign(bytes.substr(used));
    return;
  }
  pending_.append(bytes);
  const size_t used = AppendUtf8Lossy(pending_, /*is_final=*/false, out);
  pending_.erase(0, used);
}

void StreamDecoder::Flush(std::string& out) {
  AppendUtf8Lossy(pending_, /*is_final=*/true, out);
  pending_.clear();
}

}  // namespace peregrine::tokenizer
