# Shape-generic sparse attention and indexer scores vs the CPU references (and vs the fast
# kernels where both exist). Travels to the GPU machine like attention_kernels_test.
peregrine_test(generic_attention_test
  SOURCES gpu_test_util.cc generic_attention_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu
  LABELS gpu)
