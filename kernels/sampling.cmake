# Sampling: edits, greedy, truncated temperature sampling, raw logprobs; the drafter's candidates.
target_sources(peregrine_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/sampling.cu ${CMAKE_CURRENT_LIST_DIR}/draft_candidates.cu)
