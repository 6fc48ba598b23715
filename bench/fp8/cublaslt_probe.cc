// Lists which FP8 scaling configurations cuBLASLt offers an algorithm for on this GPU (the
// heuristic query only; nothing is computed). Used to choose the block-scaled FP8 path.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <initializer_list>

namespace {

const char* ModeName(int m) {
  switch (m) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return "scalar";
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return "outer_vec";
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return "vec128";
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return "blk128x128";
    default: return "?";
  }
}

int Count(cublasLtHandle_t lt, int a_mode, int b_mode, cudaDataType_t out, int fast, int m, int n, int k) {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  int found = -1;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int8_t fast_accum = static_cast<int8_t>(fast);
  size_t workspace = 32u << 20;
  if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) return -2;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum));
  if (cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)) != 0 ||
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)) != 0) {
    cublasLtMatmulDescDestroy(desc);
    return -3;
  }
  // Any non-null device pointers: the heuristic does not read them.
  void* dummy = nullptr;
  cudaMalloc(&dummy, 1 << 20);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof(dummy));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof(dummy));
  cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, k, m, k);
  cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&d, out, m, n, m);
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  cublasLtMatmulHeuristicResult_t results[8];
  int count = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, d, d, pref, 8, results, &count);
  found = s == CUBLAS_STATUS_SUCCESS ? count : -static_cast<int>(s) - 100;
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(dummy);
  return found;
}

}  // namespace

int main() {
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::printf("cublasLtCreate failed\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device %s sm_%d%d, cuBLASLt version %zu\n", prop.name, prop.major, prop.minor, cublasLtGetVersion());
  const int modes[] = {CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
                       CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F};
  std::printf("%-11s %-11s %-5s %-4s %8s %8s\n", "A(weight)", "B(act)", "out", "fast", "N=64", "N=1");
  for (int am : modes)
    for (int bm : modes)
      for (cudaDataType_t out : {CUDA_R_16BF, CUDA_R_32F})
        for (int fast : {0, 1})
          std::printf("%-11s %-11s %-5s %-4d %8d %8d\n", ModeName(am), ModeName(bm), out == CUDA_R_16BF ? "bf16" : "f32",
                      fast, Count(lt, am, bm, out, fast, 512, 64, 4096), Count(lt, am, bm, out, fast, 512, 1, 4096));
  // Which activation row counts the block-scaled mode accepts (weight 128x128, activations 1x128).
  std::printf("blk128x128 x vec128, bf16 out, M=512 K=4096, N:");
  for (int n : {1, 2, 3, 4, 8, 12, 16, 17, 24, 32, 48, 64, 100, 128, 4096})
    std::printf(" %d:%d", n,
                Count(lt, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                      CUDA_R_16BF, 0, 512, n, 4096));
  std::printf("\n");
  cublasLtDestroy(lt);
  return 0;
}
