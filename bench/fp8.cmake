# peregrine_fp8_bench: the block-scaled FP8 projection (cuBLASLt) at V4-Flash dense shapes,
# decode and prefill, against the bf16 cuBLAS projection in the same process.
if(PEREGRINE_HAVE_CUDA)
  add_executable(peregrine_fp8_bench ${CMAKE_CURRENT_LIST_DIR}/fp8/fp8_bench.cc)
  target_compile_options(peregrine_fp8_bench PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_fp8_bench PRIVATE peregrine_backend_cuda)
  set_target_properties(peregrine_fp8_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
  if(PEREGRINE_STATIC)
    target_link_options(peregrine_fp8_bench PRIVATE -Wl,--as-needed)
  endif()
endif()
