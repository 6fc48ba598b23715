# kv_transfer_bench: the KV transfer (UCX) on one host against memcpy and SHA-256; it travels
# to the GPU machine with the GPU binaries (no CUDA in it).
add_executable(kv_transfer_bench ${CMAKE_CURRENT_LIST_DIR}/kv_transfer_bench.cc)
target_compile_options(kv_transfer_bench PRIVATE ${PEREGRINE_WARNINGS})
target_link_libraries(kv_transfer_bench PRIVATE peregrine_disaggregation)
if(PEREGRINE_HAVE_CUDA)
  set_target_properties(kv_transfer_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
endif()
# peregrine_kv_ipc_bench: the CUDA-IPC transfer between two processes on one GPU (the arena's
# pages copied by the decode side's kernel) against cudaMemcpy in the same child process.
if(PEREGRINE_HAVE_CUDA)
  add_executable(peregrine_kv_ipc_bench ${CMAKE_CURRENT_LIST_DIR}/kv_ipc/kv_ipc_bench.cc)
  target_include_directories(peregrine_kv_ipc_bench PRIVATE ${PEREGRINE_BENCH_INCLUDE})
  target_compile_options(peregrine_kv_ipc_bench PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_kv_ipc_bench PRIVATE peregrine_runtime_cuda peregrine_backend_cuda)
  set_target_properties(peregrine_kv_ipc_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
  if(PEREGRINE_STATIC)
    target_link_options(peregrine_kv_ipc_bench PRIVATE -Wl,--as-needed)
  endif()
endif()
