# The sampling kernel against the host sampler (peregrine::Sample); label gpu (skipped
# without a device, except the launcher checks).
peregrine_test(sampling_kernels_test SOURCES gpu_test_util.cc sampling_test.cc token_bitmask_test.cc
  draft_candidates_test.cc
  DEPS peregrine_backend_cuda peregrine_sampling
  LABELS gpu)
