#include "cli/demo_tokenizer.h"

#ifdef PEREGRINE_DEMO_TOKENIZER
extern "C" const char peregrine_demo_tokenizer_begin[];
extern "C" const char peregrine_demo_tokenizer_end[];
#endif

namespace peregrine::cli {

std::string_view DemoTokenizerJson() {
#ifdef PEREGRINE_DEMO_TOKENIZER
  return {peregrine_demo_tokenizer_begin,
          static_cast<size_t>(peregrine_demo_tokenizer_end - peregrine_demo_tokenizer_begin)};
#else
  return {};
#endif
}

}  // namespace peregrine::cli
