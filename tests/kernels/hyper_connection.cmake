# mHC, embedding and SwiGLU kernels against the CPU model functions (label gpu).
peregrine_test(hc_kernels_test
  SOURCES gpu_test_util.cc hyper_connection_test.cc embedding_swiglu_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu peregrine_model_deepseek_v4
  LABELS gpu)
set_target_properties(hc_kernels_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
if(PEREGRINE_STATIC)
  target_link_options(hc_kernels_test PRIVATE -Wl,--as-needed)
endif()
