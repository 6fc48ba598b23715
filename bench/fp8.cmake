# peregrine_fp8_bench: the block-scaled FP8 projections (cuBLASLt Fp8Linear; the W8A16 decode
# kernel) at V4-Flash dense shapes, decode and prefill, against the bf16 cuBLAS projection in
# the same process.
if(PEREGRINE_HAVE_CUDA)
  add_executable(peregrine_fp8_bench ${CMAKE_CURRENT_LIST_DIR}/fp8/fp8_bench.cc)
  target_include_directories(peregrine_fp8_bench PRIVATE ${PEREGRINE_BENCH_INCLUDE})
  target_compile_options(peregrine_fp8_bench PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_fp8_bench PRIVATE peregrine_backend_cuda)
  set_target_properties(peregrine_fp8_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
  if(PEREGRINE_STATIC)
    target_link_options(peregrine_fp8_bench PRIVATE -Wl,--as-needed)
  endif()
endif()
# peregrine_cublaslt_probe: which FP8 scaling modes and batch sizes cuBLASLt offers on this GPU.
if(PEREGRINE_HAVE_CUDA)
  add_executable(peregrine_cublaslt_probe ${CMAKE_CURRENT_LIST_DIR}/fp8/cublaslt_probe.cc)
  target_compile_options(peregrine_cublaslt_probe PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_cublaslt_probe PRIVATE CUDA::cublasLt CUDA::cudart_static)
  set_target_properties(peregrine_cublaslt_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
endif()
