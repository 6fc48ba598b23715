# Sampling: edits, greedy, truncated temperature sampling, raw logprobs.
target_sources(peregrine_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/sampling.cu)
