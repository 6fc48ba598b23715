// The tokenizer.json "post_processor", for single sequences: ids added around the encoded
// text when add_special_tokens is requested. Supported: null, ByteLevel (adds nothing to
// ids), TemplateProcessing, Sequence of these.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "tokenizer/json_util.h"

namespace peregrine::tokenizer {

class PostProcessor {
 public:
  // `j` is the "post_processor" value (null allowed).
  static Result<PostProcessor> FromJson(const Json& j);

  // Wraps `ids` with the template's special tokens.
  void Apply(std::vector<int32_t>& ids) const;

  // The largest id the template adds, or -1 when it adds none.
  int32_t max_id() const;

 private:
  static Status Add(const Json& j, PostProcessor& p);

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace peregrine::tokenizer
