# peregrine_all_reduce_bench: the custom all-reduce (CUDA IPC) against NCCL between the GPUs
# of one host, per message size (needs as many GPUs as ranks).
if(PEREGRINE_HAVE_NCCL)
  add_executable(peregrine_all_reduce_bench ${CMAKE_CURRENT_LIST_DIR}/all_reduce/all_reduce_bench.cc)
  target_compile_options(peregrine_all_reduce_bench PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_all_reduce_bench PRIVATE peregrine_distributed CUDA::cudart_static)
  set_target_properties(peregrine_all_reduce_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
endif()
