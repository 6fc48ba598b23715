#pragma once

#include <CLI/CLI.hpp>

namespace peregrine::cli {

// `peregrine score`: teacher-forced scoring of token rows on the CPU or CUDA backend (each row
// one forward with every position's logits). Per predicted token it writes the target's raw
// logprob and the argmax; optionally every logits row, for comparisons against a reference
// (perplexity, top-1 agreement, KL; tools/demo_model_fidelity.py).
void AddScoreCommand(CLI::App& app);

}  // namespace peregrine::cli
