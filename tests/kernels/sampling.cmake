# The sampling kernel against the host sampler (peregrine::Sample); label gpu (skipped
# without a device, except the launcher checks).
peregrine_test(sampling_kernels_test SOURCES gpu_test_util.cc sampling_test.cc
  DEPS peregrine_backend_cuda peregrine_sampling
  LABELS gpu)
set_target_properties(sampling_kernels_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
if(PEREGRINE_STATIC)
  target_link_options(sampling_kernels_test PRIVATE -Wl,--as-needed)
endif()
