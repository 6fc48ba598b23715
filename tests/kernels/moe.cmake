# MoE kernels (routing, bookkeeping, expert GEMMs, combine) against the CPU references and
# the model's MoE; label gpu (skipped without a device, except the launcher checks).
peregrine_test(moe_kernels_test SOURCES gpu_test_util.cc moe_kernels_test.cc moe_route_align_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu peregrine_model_deepseek_v4
  LABELS gpu)
