# MoE: routing, expert bookkeeping and combine (moe_router), the expert GEMMs (moe_grouped_gemm).
target_sources(peregrine_kernels PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/moe_router.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_grouped_gemm.cu
  ${CMAKE_CURRENT_LIST_DIR}/moe_grouped_gemm_mma.cuh)
