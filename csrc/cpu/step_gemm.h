// The per-step GEMM of the CPU time loops, C = A op(B) with the same weights B at every step.
//
// When torch's BLAS is MKL (float32), B is packed once per call with cblas_sgemm_pack and every
// step calls cblas_sgemm_compute, which skips the repacking of B that a plain sgemm does on each
// call (measured: the main cost of a small-M recurrent GEMM). MKL is found through weak symbols,
// resolved from libtorch_cpu at load time; with another BLAS, or for float64, each step runs
// at::mm_out instead. Called from inside the OpenMP region, MKL runs on the calling thread.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

extern "C" {
// MKL's CBLAS packed-GEMM entry points (MKL_INT is int in torch's LP64 MKL).
__attribute__((weak)) size_t cblas_sgemm_pack_get_size(int identifier, int m, int n, int k);
__attribute__((weak)) void cblas_sgemm_pack(int layout, int identifier, int trans, int m, int n,
                                            int k, float alpha, const float* src, int ld,
                                            float* dest);
__attribute__((weak)) void cblas_sgemm_compute(int layout, int transa, int transb, int m, int n,
                                               int k, const float* a, int lda, const float* b,
                                               int ldb, float beta, float* c, int ldc);
}

namespace tsrnn {

namespace cblas {
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112, kPacked = 151, kBMatrix = 162;
}

inline bool mkl_packed_gemm_available() {
  return cblas_sgemm_pack_get_size != nullptr && cblas_sgemm_pack != nullptr &&
         cblas_sgemm_compute != nullptr;
}

template <typename T>
class StepGemm {
 public:
  // B is K x N: b[k * ldb + n], or b[n * ldb + k] if trans_b. A is M x K, C is M x N (row-major).
  StepGemm(const T* b, bool trans_b, int64_t ldb, int64_t M, int64_t N, int64_t K,
           const at::TensorOptions& options)
      : N_(N), K_(K), options_(options) {
    if constexpr (std::is_same_v<T, float>) {
      if (mkl_packed_gemm_available()) {
        const size_t bytes = cblas_sgemm_pack_get_size(cblas::kBMatrix, M, N, K);
        packed_ = at::empty({static_cast<int64_t>(bytes)}, options.dtype(at::kByte));
        cblas_sgemm_pack(cblas::kRowMajor, cblas::kBMatrix, trans_b ? cblas::kTrans : cblas::kNoTrans,
                         M, N, K, 1.0f, b, ldb, reinterpret_cast<float*>(packed_.data_ptr()));
        return;
      }
    }
    b_ = at::from_blob(const_cast<T*>(b), {K, N},
                       trans_b ? at::IntArrayRef{1, ldb} : at::IntArrayRef{ldb, 1}, options);
  }

  // C = A op(B) over the first m <= M rows of A and C (a packed batch runs fewer rows as its
  // sequences end); a: [m, K] with row stride lda, c: [m, N] with row stride ldc.
  void operator()(int64_t m, const T* a, int64_t lda, T* c, int64_t ldc) {
    if constexpr (std::is_same_v<T, float>) {
      if (packed_.defined()) {
        cblas_sgemm_compute(cblas::kRowMajor, cblas::kNoTrans, cblas::kPacked, m, N_, K_, a, lda,
                            reinterpret_cast<const float*>(packed_.data_ptr()), N_, 0.0f, c, ldc);
        return;
      }
    }
    at::Tensor out = at::from_blob(c, {m, N_}, {ldc, 1}, options_);
    at::mm_out(out, at::from_blob(const_cast<T*>(a), {m, K_}, {lda, 1}, options_), b_);
  }

 private:
  int64_t N_, K_;
  at::TensorOptions options_;
  at::Tensor packed_, b_;
};

}  // namespace tsrnn
