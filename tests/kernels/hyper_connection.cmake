# mHC, embedding and SwiGLU kernels against the CPU model functions (label gpu).
peregrine_test(hc_kernels_test
  SOURCES gpu_test_util.cc hyper_connection_test.cc embedding_swiglu_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu peregrine_model_deepseek_v4
  LABELS gpu)
