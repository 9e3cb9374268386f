// The SIMT emulation in place of cuBLAS's <cublas_v2.h> (see tests/simt/simt.h): the one call the
// tensor-core GEMMs make (csrc/gemm/cuda/tensor_core_gemm.h), cublasGemmEx, on CPU memory, as
// cuBLAS documents it: C = alpha op(A) op(B) + beta C for column-major A, B, C with leading
// dimensions lda, ldb, ldc, op N or T; C is not read where beta is 0. Float32 accumulation in
// the order of k. What cuBLAS would reject is rejected (CUBLAS_STATUS_INVALID_VALUE: a negative
// size, a leading dimension below max(1, rows), a type the compute type does not take), and one
// thing cuBLAS accepts: a TF32 product (CUBLAS_COMPUTE_32F_FAST_TF32) of an operand that is not
// rounded to TF32, whose result would depend on how cuBLAS rounds, which the GEMMs' callers do not
// leave to it. cublasGetStatusString names the reason of the last rejection.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "cuda_bf16.h"

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_INVALID_VALUE = 7 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cudaDataType { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
struct cublasContext {};
using cublasHandle_t = cublasContext*;

namespace simt {
namespace cublas {

inline std::string& last_rejection() {
  thread_local std::string reason;
  return reason;
}

inline cublasStatus_t reject(std::string reason) {
  last_rejection() = "simt cuBLAS: " + reason;
  return CUBLAS_STATUS_INVALID_VALUE;
}

// Element (row, col) of op(X), X column-major with leading dimension ld, as float.
inline float element(const void* x, cudaDataType type, int ld, cublasOperation_t op, int row, int col) {
  const std::int64_t i = op == CUBLAS_OP_N ? row + static_cast<std::int64_t>(col) * ld
                                           : col + static_cast<std::int64_t>(row) * ld;
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
  return static_cast<const float*>(x)[i];
}

inline bool tf32_value(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x1fffu) == 0 || !std::isfinite(v);
}

}  // namespace cublas
}  // namespace simt

inline const char* cublasGetStatusString(cublasStatus_t status) {
  if (status == CUBLAS_STATUS_SUCCESS) return "CUBLAS_STATUS_SUCCESS";
  if (status == CUBLAS_STATUS_NOT_INITIALIZED) return "CUBLAS_STATUS_NOT_INITIALIZED";
  return simt::cublas::last_rejection().c_str();
}

inline cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                                   const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                   cudaDataType Ctype, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t) {
  using namespace simt::cublas;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0) return reject("a negative size");
  const int a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) {
    return reject("a leading dimension below its matrix's rows (lda " + std::to_string(lda) + ", ldb " +
                  std::to_string(ldb) + ", ldc " + std::to_string(ldc) + " for m " + std::to_string(m) + ", n " +
                  std::to_string(n) + ", k " + std::to_string(k) + ")");
  }
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const cudaDataType operands = tf32 ? CUDA_R_32F : CUDA_R_16BF;
  if (Atype != operands || Btype != operands || Ctype != CUDA_R_32F ||
      (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32)) {
    return reject("operand types the compute type does not take (emulated: float32 with FAST_TF32, bf16 with 32F)");
  }
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  float* c = static_cast<float*>(C);
  for (int col = 0; col < n; ++col) {
    for (int row = 0; row < m; ++row) {
      float sum = 0.0f;
      for (int l = 0; l < k; ++l) {
        const float x = element(A, Atype, lda, transa, row, l), y = element(B, Btype, ldb, transb, l, col);
        if (tf32 && !(tf32_value(x) && tf32_value(y))) {
          return reject("a TF32 product of an operand not rounded to TF32 (op(A)[" + std::to_string(row) + ", " +
                        std::to_string(l) + "] or op(B)[" + std::to_string(l) + ", " + std::to_string(col) + "])");
        }
        sum += x * y;
      }
      float& out = c[row + static_cast<std::int64_t>(col) * ldc];
      out = b == 0.0f ? a * sum : a * sum + b * out;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
