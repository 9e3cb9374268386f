// The AVX2+FMA micro-kernel of csrc/gemm/panel_gemm.h: 8 floats per vector, NR = 16, MR <= 6
// (12 accumulators, two panel vectors and one broadcast in 16 registers).
#include "gemm/panel_gemm.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// Every header but the intrinsics' and the tile's is included before the target pragma: a
// library template first instantiated under it would carry the ISA into code other files share.
#include <algorithm>
#include <cstdint>
#include <utility>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

#include "gemm/panel_tile.h"

namespace tsrnn {
namespace {

struct Avx2 {
  using Vec = __m256;
  static constexpr int kWidth = 8, kMaxRows = 6;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec load(const float* p, int n) { return n == kWidth ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask(n)); }
  static Vec broadcast(float x) { return _mm256_set1_ps(x); }
  static Vec fma(Vec a, Vec b, Vec acc) { return _mm256_fmadd_ps(a, b, acc); }
  static void store(float* p, Vec v, int n) {
    if (n == kWidth) {
      _mm256_storeu_ps(p, v);
    } else if (n > 0) {
      _mm256_maskstore_ps(p, mask(n), v);
    }
  }
  // The first n of the 8 lanes set.
  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
};

constexpr PanelKernel kKernel = panel::make_kernel<Avx2>("avx2");

}  // namespace
}  // namespace tsrnn
#pragma GCC pop_options

namespace tsrnn {
const PanelKernel* avx2_panel_kernel() { return &kKernel; }
}  // namespace tsrnn
#else
namespace tsrnn {
const PanelKernel* avx2_panel_kernel() { return nullptr; }
}  // namespace tsrnn
#endif
