# peregrine_hc_bench: mHC pre/post/head (+ embedding, SwiGLU) at V4-Flash shapes on the GPU,
# with cuBLAS SGEMM as the peer for the mixes GEMM.
if(PEREGRINE_HAVE_CUDA)
  add_executable(peregrine_hc_bench ${CMAKE_CURRENT_LIST_DIR}/hc/hc_bench.cc)
  target_compile_options(peregrine_hc_bench PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_hc_bench PRIVATE peregrine_kernels CUDA::cublas)
  set_target_properties(peregrine_hc_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
  if(PEREGRINE_STATIC)
    target_link_options(peregrine_hc_bench PRIVATE -Wl,--as-needed)
  endif()
endif()
