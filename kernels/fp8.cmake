# FP8 activation quantisation (dynamic per-token, 128-element groups) for the block-scaled GEMM.
target_sources(peregrine_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/quantize_fp8.cu)
# W8A16 block-scaled projection for decode batches (bf16 x, e4m3 weights dequantised in
# registers, bf16 MMA) and the load-time weight quantiser into its 128x128 block format.
target_sources(peregrine_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/fp8_w8a16.cu
  ${CMAKE_CURRENT_LIST_DIR}/quantize_fp8_blocks.cu)
