# kv_transfer_bench: the KV transfer (UCX) on one host against memcpy and SHA-256; it travels
# to the GPU machine with the GPU binaries (no CUDA in it).
add_executable(kv_transfer_bench ${CMAKE_CURRENT_LIST_DIR}/kv_transfer_bench.cc)
target_compile_options(kv_transfer_bench PRIVATE ${PEREGRINE_WARNINGS})
target_link_libraries(kv_transfer_bench PRIVATE peregrine_disaggregation)
if(PEREGRINE_HAVE_CUDA)
  set_target_properties(kv_transfer_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
endif()
