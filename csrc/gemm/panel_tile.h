// The micro-kernel of csrc/gemm/panel_gemm.h, generic over a vector ISA `V`:
//   V::Vec, V::kWidth (floats per vector), V::kMaxRows (MR's bound), V::zero(), V::load(p),
//   V::broadcast(x), V::fma(a, b, acc) = a * b + acc, V::load(p, n) and V::store(p, v, n) (the
//   first n <= kWidth lanes; the others load as zero).
// Included only by the files that compile it for one ISA (panel_avx512.cpp, panel_avx2.cpp),
// after their `#pragma GCC target`, so each instantiation is built for its own ISA; they include
// the standard headers this uses (<algorithm>, <cstdint>, <utility>) before the pragma. GCC
// gives a function template the target in force where it is defined, so its instantiations, which
// it emits at the end of the file after `pop_options`, keep that ISA.
#pragma once

#include "gemm/panel_gemm.h"

namespace tsrnn {
namespace panel {

// C[0:MR, 0:cols] = init + A[0:MR, 0:K] panel, A[r, k] at a[r * lda + k * a_step], panel
// [K][2 W]: two vectors of accumulators per row, which start at init's rows (row r at
// init + r * ld_init; zero where init is null).
template <typename V, int MR>
void tile(int64_t K, const float* a, int64_t lda, int64_t a_step, const float* panel, float* c, int64_t ldc,
          int cols, const float* init, int64_t ld_init) {
  constexpr int W = V::kWidth;
  const int first = std::min(cols, W), second = std::max(cols - W, 0);
  typename V::Vec acc[MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = init ? V::load(init + r * ld_init, first) : V::zero();
    acc[r][1] = init ? V::load(init + r * ld_init + W, second) : V::zero();
  }
  for (int64_t k = 0; k < K; ++k) {
    const typename V::Vec b0 = V::load(panel + k * 2 * W), b1 = V::load(panel + k * 2 * W + W);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const typename V::Vec x = V::broadcast(a[r * lda + k * a_step]);
      acc[r][0] = V::fma(x, b0, acc[r][0]);
      acc[r][1] = V::fma(x, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    V::store(c + r * ldc, acc[r][0], first);
    V::store(c + r * ldc + W, acc[r][1], second);
  }
}

template <typename V, int... MR>
constexpr PanelKernel kernel(const char* name, std::integer_sequence<int, MR...>) {
  return {name, 2 * V::kWidth, V::kMaxRows, {nullptr, &tile<V, MR + 1>...}};
}

// The PanelKernel of ISA V, tiles of 1 to V::kMaxRows rows.
template <typename V>
constexpr PanelKernel make_kernel(const char* name) {
  return kernel<V>(name, std::make_integer_sequence<int, V::kMaxRows>{});
}

}  // namespace panel
}  // namespace tsrnn
