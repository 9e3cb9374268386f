// The per-step GEMM of the CPU time loops, C = A op(B) with the same weights B at every step.
//
// float32: B is packed once per call into the panels of csrc/gemm/panel_gemm.h's kernel for this
// CPU (AVX-512 or AVX2+FMA), and each step runs its register-blocked micro-kernel. float64, or a
// CPU or build with neither kernel (or TSRNN_CPU_GEMM=aten): each step calls at::mm_out.
// Constructed and called on the thread that owns the weights' slice (csrc/recurrence/cpu/recurrence.cpp),
// so the packing is spread over the threads and each slice's panels are touched by one thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <type_traits>

#include "gemm/panel_gemm.h"

namespace tsrnn {

template <typename T>
class StepGemm {
 public:
  // B is K x N: b[k * ldb + n], or b[n * ldb + k] if trans_b. A is m x K, C is m x N (row-major).
  StepGemm(const T* b, bool trans_b, int64_t ldb, int64_t N, int64_t K, const at::TensorOptions& options)
      : N_(N), K_(K), options_(options) {
    if constexpr (std::is_same_v<T, float>) {
      kernel_ = default_panel_kernel();
      if (kernel_ != nullptr) {
        packed_ = at::empty({packed_size(*kernel_, N, K)}, options);
        pack_panels(*kernel_, trans_b ? Strided{b, 1, ldb} : Strided{b, ldb, 1}, 0, K, N, packed_.data_ptr<float>());
        return;
      }
    }
    b_ = at::from_blob(const_cast<T*>(b), {K, N},
                       trans_b ? at::IntArrayRef{1, ldb} : at::IntArrayRef{ldb, 1}, options);
  }

  // C = A op(B) over m rows (a packed batch runs fewer rows as its sequences end);
  // a: [m, K] with row stride lda, c: [m, N] with row stride ldc.
  void operator()(int64_t m, const T* a, int64_t lda, T* c, int64_t ldc) {
    if constexpr (std::is_same_v<T, float>) {
      if (kernel_ != nullptr) {
        panel_gemm(*kernel_, m, N_, K_, a, lda, packed_.data_ptr<float>(), c, ldc);
        return;
      }
    }
    at::Tensor out = at::from_blob(c, {m, N_}, {ldc, 1}, options_);
    at::mm_out(out, at::from_blob(const_cast<T*>(a), {m, K_}, {lda, 1}, options_), b_);
  }

 private:
  int64_t N_, K_;
  at::TensorOptions options_;
  const PanelKernel* kernel_ = nullptr;
  at::Tensor packed_, b_;
};

}  // namespace tsrnn
