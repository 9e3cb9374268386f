// The AVX-512 micro-kernel of csrc/gemm/panel_gemm.h: 16 floats per vector, NR = 32, MR <= 14
// (28 accumulators, two panel vectors and one broadcast in 32 registers).
#include "gemm/panel_gemm.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// Every header but the intrinsics' and the tile's is included before the target pragma: a
// library template first instantiated under it would carry the ISA into code other files share.
#include <algorithm>
#include <cstdint>
#include <utility>

#pragma GCC push_options
#pragma GCC target("avx512f")
#include <immintrin.h>

#include "gemm/panel_tile.h"

namespace tsrnn {
namespace {

struct Avx512 {
  using Vec = __m512;
  static constexpr int kWidth = 16, kMaxRows = 14;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load(const float* p, int n) {
    return n == kWidth ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static Vec broadcast(float x) { return _mm512_set1_ps(x); }
  static Vec fma(Vec a, Vec b, Vec acc) { return _mm512_fmadd_ps(a, b, acc); }
  static void store(float* p, Vec v, int n) {
    if (n == kWidth) {
      _mm512_storeu_ps(p, v);
    } else if (n > 0) {
      _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
    }
  }
};

constexpr PanelKernel kKernel = panel::make_kernel<Avx512>("avx512");

}  // namespace
}  // namespace tsrnn
#pragma GCC pop_options

namespace tsrnn {
const PanelKernel* avx512_panel_kernel() { return &kKernel; }
}  // namespace tsrnn
#else
namespace tsrnn {
const PanelKernel* avx512_panel_kernel() { return nullptr; }
}  // namespace tsrnn
#endif
