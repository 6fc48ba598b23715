# FP8 activation quantisation (dynamic per-token, 128-element groups) for the block-scaled GEMM.
target_sources(peregrine_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/quantize_fp8.cu)
