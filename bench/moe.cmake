# peregrine_moe_bench: the MoE expert GEMMs at V4-Flash decode shapes vs a cuBLAS loop.
if(PEREGRINE_HAVE_CUDA)
  add_executable(peregrine_moe_bench ${CMAKE_CURRENT_LIST_DIR}/moe/moe_bench.cc)
  target_include_directories(peregrine_moe_bench PRIVATE ${PEREGRINE_BENCH_INCLUDE})
  target_compile_options(peregrine_moe_bench PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_moe_bench PRIVATE peregrine_backend_cuda)
  set_target_properties(peregrine_moe_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
  # Travels to the GPU machine: only cuBLAS and the CUDA driver stay shared.
  if(PEREGRINE_STATIC)
    target_link_options(peregrine_moe_bench PRIVATE -Wl,--as-needed)
  endif()
endif()
