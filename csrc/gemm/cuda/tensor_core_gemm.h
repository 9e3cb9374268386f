// The GEMMs around a CUDA recurrence in a call's precision, on the tensor cores through cuBLAS:
// the input projection x W_ih^T + b, its gradients g W_ih and g^T x, and dW_hh (the recurrence
// operator's weight_gemm, tensor_core_policy.h).
//
//   gemm(out, a, b, accumulate):  out = a b (+ out), a [M, K], b [K, N], out [M, N] float32,
//   a and b both float32 holding TF32 values (round_tf32 first): TF32 products
//   (CUBLAS_COMPUTE_32F_FAST_TF32); or both bfloat16: bf16 products (CUBLAS_COMPUTE_32F); float32
//   accumulation either way, the result never rounded to 16 bits.
//
// The product of two TF32 (bf16) values is exact in float32, so the result is the TF32 (bf16) GEMM's
// whatever rounding cuBLAS applies to its inputs, and no torch flag is read or set: cuBLAS is
// called on torch's handle for this thread and the current stream (at::cuda::getCurrentCUDABlasHandle)
// with the compute type named per call, which is what makes it safe under threads. Row-major
// tensors are column-major transposes to cuBLAS: out^T = b^T a^T, an operand whose rows or columns
// are contiguous is passed in place (op N or T, ld its other stride), any other is copied first.
// The SIMT emulation (tests/simt) compiles this file against its own cuBLAS (tests/simt/include/
// cublas_v2.h: the documented column-major contract, plus a check that TF32 operands are rounded).
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <climits>
#include <cstdint>

#include "check_message.h"

namespace tsrnn {
namespace cuda_gemm {

using at::Tensor;

// round_tf32.cu: out[0, n) = the TF32 rounding of in[0, n), one kernel on `stream`.
cudaError_t launch_round_tf32(const float* in, float* out, std::int64_t n, cudaStream_t stream);

// A float32 tensor's values rounded to TF32 (cvt.rna, as tsrnn.precision.round_operands), one kernel.
inline Tensor round_tf32(const Tensor& x) {
  TSRNN_CHECK(x.scalar_type() == at::kFloat, "tsrnn: round_tf32 takes float32, got ", x.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  const Tensor in = x.contiguous();
  Tensor out = at::empty_like(in);
  const cudaError_t err = launch_round_tf32(in.data_ptr<float>(), out.data_ptr<float>(), in.numel(),
                                            c10::cuda::getCurrentCUDAStream());
  TSRNN_CHECK(err == cudaSuccess, "tsrnn: the TF32 rounding kernel failed: ", cudaGetErrorString(err));
  return out;
}

// A [rows, cols] operand as cuBLAS reads it: the column-major matrix at `data` with leading
// dimension `ld`, seen through `op` as the transpose of the tensor.
struct ColumnMajor {
  Tensor kept;  // the tensor whose memory is read (the operand, or its contiguous copy)
  cublasOperation_t op;
  std::int64_t ld;
};

inline ColumnMajor column_major(const Tensor& x) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if ((cols == 1 || x.stride(1) == 1) && (rows == 1 || x.stride(0) >= cols)) {  // rows contiguous: x^T in place
    return {x, CUBLAS_OP_N, rows == 1 ? cols : x.stride(0)};
  }
  if ((rows == 1 || x.stride(0) == 1) && (cols == 1 || x.stride(1) >= rows)) {  // columns contiguous: x, transposed
    return {x, CUBLAS_OP_T, cols == 1 ? rows : x.stride(1)};
  }
  const Tensor copy = x.contiguous();
  return {copy, CUBLAS_OP_N, cols};
}

inline int as_int(std::int64_t value, const char* what) {
  TSRNN_CHECK(value <= INT_MAX, "tsrnn: cuBLAS takes a ", what, " of at most ", INT_MAX, ", got ", value);
  return static_cast<int>(value);
}

// out = a b (+ out): see the file's comment.
inline void gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  const std::int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  TSRNN_CHECK(a.dim() == 2 && b.dim() == 2 && b.size(0) == K && out.dim() == 2 && out.size(0) == M && out.size(1) == N,
              "tsrnn: the tensor-core GEMM takes a [M, K], b [K, N] and out [M, N], got ", a.sizes(), ", ", b.sizes(),
              " and ", out.sizes());
  const bool tf32 = a.scalar_type() == at::kFloat;
  TSRNN_CHECK(a.scalar_type() == b.scalar_type() && (tf32 || a.scalar_type() == at::kBFloat16) &&
                  out.scalar_type() == at::kFloat && out.stride(1) == 1 && (M == 1 || out.stride(0) >= N),
              "tsrnn: the tensor-core GEMM takes float32 (TF32 values) or bfloat16 operands and a float32 out with "
              "contiguous rows, got ", a.scalar_type(), ", ", b.scalar_type(), " and ", out.scalar_type());
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum
    if (!accumulate) out.zero_();
    return;
  }
  const c10::cuda::CUDAGuard guard(out.device());
  const ColumnMajor left = column_major(b), right = column_major(a);  // out^T = b^T a^T
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cudaDataType type = tf32 ? CUDA_R_32F : CUDA_R_16BF;
  const cublasStatus_t status = cublasGemmEx(
      at::cuda::getCurrentCUDABlasHandle(), left.op, right.op, as_int(N, "dimension"), as_int(M, "dimension"),
      as_int(K, "dimension"), &alpha, left.kept.data_ptr(), type, as_int(left.ld, "leading dimension"),
      right.kept.data_ptr(), type, as_int(right.ld, "leading dimension"), &beta, out.data_ptr(), CUDA_R_32F,
      as_int(M == 1 ? N : out.stride(0), "leading dimension"),
      tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  TSRNN_CHECK(status == CUBLAS_STATUS_SUCCESS, "tsrnn: cublasGemmEx failed: ", cublasGetStatusString(status));
}

// bias + a b as a new float32 [M, N] tensor (torch.ops.tsrnn_tensor_core.mm): a [M, K], b [K, N]
// as `gemm` takes them, bias an optional float32 [N].
inline Tensor mm(const Tensor& a, const Tensor& b, const c10::optional<Tensor>& bias) {
  TSRNN_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "tsrnn: tensor_core mm takes a [M, K] and b [K, N], got ",
              a.sizes(), " and ", b.sizes());
  TSRNN_CHECK(a.device() == b.device() && (!bias || bias->device() == a.device()),
              "tsrnn: tensor_core mm takes its tensors on one device, got ", a.device(), " and ", b.device());
  TSRNN_CHECK(!bias || (bias->dim() == 1 && bias->size(0) == b.size(1) && bias->scalar_type() == at::kFloat),
              "tsrnn: tensor_core mm takes a float32 bias [N] with N=", b.size(1));
  const Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kFloat));
  if (bias) out.copy_(bias->unsqueeze(0).expand_as(out));
  gemm(out, a, b, bias.has_value());
  return out;
}

}  // namespace cuda_gemm
}  // namespace tsrnn
