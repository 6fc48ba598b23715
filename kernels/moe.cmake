# MoE: routing, expert bookkeeping and combine (moe_router), the expert GEMMs (moe_grouped_gemm).
target_sources(peregrine_kernels PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/moe_router.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_grouped_gemm.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_grouped_gemm_mma.cuh)
# The load-time quantiser of routed experts into MXFP4 (bf16 checkpoints).
target_sources(peregrine_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/quantize_mxfp4.cu)
