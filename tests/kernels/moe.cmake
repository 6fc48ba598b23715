# MoE kernels (routing, bookkeeping, expert GEMMs, combine) against the CPU references and
# the model's MoE; label gpu (skipped without a device, except the launcher checks).
peregrine_test(moe_kernels_test SOURCES gpu_test_util.cc moe_kernels_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu peregrine_model_deepseek_v4
  LABELS gpu)
set_target_properties(moe_kernels_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
if(PEREGRINE_STATIC)
  target_link_options(moe_kernels_test PRIVATE -Wl,--as-needed)
endif()
