#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

// `peregrine score`: teacher-forced scoring of token rows on the CPU or CUDA backend (each row
// one forward with every position's logits). Per predicted token it writes the target's raw
// logprob and the argmax; optionally every logits row, for comparisons against a reference
// (perplexity, top-1 agreement, KL; tools/demo_model_fidelity.py), and on the CPU the same for
// the checkpoint's MTP layer (the token after next).
void AddScoreCommand(CLI::App& app);

}  // namespace peregrine::cli
