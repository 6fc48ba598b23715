# Block-scaled FP8 projections through cuBLASLt (activation quantisation + GEMM).
target_sources(peregrine_backend_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ops/fp8_linear.cc)
target_link_libraries(peregrine_backend_cuda PUBLIC CUDA::cublasLt)
