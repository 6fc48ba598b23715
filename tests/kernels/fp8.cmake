# Block-scaled FP8 projection: activation quantisation (bit-exact vs the CPU reference) and
# the cuBLASLt GEMM (vs exact dequantisation, and vs the bf16 projection); label gpu.
peregrine_test(fp8_linear_test SOURCES gpu_test_util.cc fp8_linear_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu LABELS gpu)
# W8A16 decode projection and the FP8 dispatch: against exact dequantisation (model/dequant.h)
# over N = 1..100, bf16/f32 outputs, the weight quantiser bit for bit, a capture; label gpu.
peregrine_test(fp8_w8a16_test SOURCES gpu_test_util.cc fp8_w8a16_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu peregrine_model LABELS gpu)
