# Block-scaled FP8 projection: activation quantisation (bit-exact vs the CPU reference) and
# the cuBLASLt GEMM (vs exact dequantisation, and vs the bf16 projection); label gpu.
peregrine_test(fp8_linear_test SOURCES gpu_test_util.cc fp8_linear_test.cc
  DEPS peregrine_backend_cuda peregrine_backend_cpu LABELS gpu)
set_target_properties(fp8_linear_test PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
if(PEREGRINE_STATIC)
  target_link_options(fp8_linear_test PRIVATE -Wl,--as-needed)
endif()
