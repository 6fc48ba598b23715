# Shape-generic sparse attention and indexer scores vs the CPU references (and vs the fast
# kernels where both exist). Travels to the GPU machine like attention_kernels_test.
peregrine_test(generic_attention_test
  SOURCES gpu_test_util.cc generic_attention_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu
  LABELS gpu)
set_target_properties(generic_attention_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
if(PEREGRINE_STATIC)
  target_link_options(generic_attention_test PRIVATE -Wl,--as-needed)
endif()
