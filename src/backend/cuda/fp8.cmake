# Block-scaled FP8 projections through cuBLASLt (activation quantisation + GEMM).
target_sources(peregrine_backend_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ops/fp8_linear.cc)
target_link_libraries(peregrine_backend_cuda PUBLIC CUDA::cublasLt)
# The W8A16 decode projection, the weight quantiser, and the dispatch between W8A16 (decode)
# and cuBLASLt (prefill) for dense FP8 projections.
target_sources(peregrine_backend_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ops/fp8_w8a16.cc
  ${CMAKE_CURRENT_LIST_DIR}/ops/fp8_projection.cc)
