// Tensor cores in the SIMT emulation: nvcuda::wmma's fragments, loads, stores and mma_sync, for the
// shapes the kernels use (TF32 m16n16k8, bf16 m16n16k16, float accumulators; other shapes and
// types do not compile).
//
// A fragment holds each lane's elements in x[], in a layout the emulator draws from the
// thread-order seed for each fragment type (use, shape, element type and row/col_major:
// simt::fragment_layout, which element of the tile each lane's x[i] holds), so code that assumes a
// layout, or copies x[] between fragments of different types, computes garbage. Loads, stores and
// mma_sync are warp collectives: all 32 lanes must call them (the emulation's strict rules of warp
// collectives), and each is a point where another thread may run. They check CUDA's rules: the
// pointer, ldm and layout the same in every lane, the pointer 256-bit aligned, ldm a multiple of
// 16 bytes' worth of elements. A lane's load or store touches its own elements only, after the
// collective, so a lane that reads what another stored needs a __syncwarp as on the GPU.
// Arithmetic: each product of two operands is exact in float32 (TF32 and bf16 have at most 11
// significant bits), summed in float32 in the order k = 0, 1, ... onto the accumulator; a TF32
// operand is read as the hardware reads it, the low 13 mantissa bits of the float ignored unless
// __float_to_tf32 rounded them (cvt.rna).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_bf16.h"
#include "simt.h"

namespace simt {

// The layout of fragment type `kind` (rows x cols elements over 32 lanes): element perm[l * n + i]
// (row-major index in the tile) is x[i] of lane l, n = rows * cols / 32. Drawn from the seed.
const int* fragment_layout(int kind, int rows, int cols);

// A wmma load or store `what`: the warp collective, and CUDA's rules on its arguments.
void matrix_access(const char* what, const void* pointer, unsigned ldm, unsigned element_bytes, bool row_major,
                   int line);

}  // namespace simt

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

namespace detail {

template <typename T>
struct storage {
  using type = T;
};
template <>
struct storage<precision::tf32> {
  using type = float;
};

inline float value(float x, bool tf32) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if (!tf32 || (u & 0x7fffffffu) > 0x7f800000u) return x;  // a NaN stays NaN
  u &= 0xffffe000u;  // the hardware reads 10 mantissa bits of a TF32 operand
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline float value(__nv_bfloat16 x, bool) { return __bfloat162float(x); }

// fill_fragment's value in the fragment's element type (CUDA converts a float to bf16 to nearest even).
inline void assign(float& to, float v) { to = v; }
inline void assign(__nv_bfloat16& to, float v) { to = __float2bfloat16(v); }
inline void assign(__nv_bfloat16& to, __nv_bfloat16 v) { to = v; }

template <typename Use>
constexpr int use_id() {
  return std::is_same<Use, matrix_a>::value ? 0 : std::is_same<Use, matrix_b>::value ? 1 : 2;
}
template <typename Layout>
constexpr int layout_id() {
  return std::is_same<Layout, row_major>::value ? 1 : std::is_same<Layout, col_major>::value ? 2 : 0;
}
template <typename T>
constexpr int type_id() {
  return std::is_same<T, precision::tf32>::value ? 1 : std::is_same<T, __nv_bfloat16>::value ? 2 : 0;
}

// The shapes and types of the emulated fragments, as CUDA defines them: TF32 and bf16 operands
// (row_major or col_major) of m16n16k8 and m16n16k16, float accumulators of either.
template <typename Use, int M, int N, int K, typename T, typename Layout>
constexpr bool supported() {
  const bool k = M == 16 && N == 16 && (K == 8 || K == 16);
  if (std::is_same<Use, accumulator>::value) return k && std::is_same<T, float>::value && layout_id<Layout>() == 0;
  return k && type_id<T>() == (K == 8 ? 1 : 2) && layout_id<Layout>() != 0;
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(detail::supported<Use, M, N, K, T, Layout>(), "a wmma fragment the emulation (or CUDA) lacks");
  static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
  static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
  static constexpr int num_elements = rows * cols / 32;
  static constexpr bool tf32 = std::is_same<T, precision::tf32>::value;
  // The fragment type's identity, which its layout is drawn for (M and N are 16).
  static constexpr int kind = ((detail::use_id<Use>() * 3 + detail::layout_id<Layout>()) * 3 + detail::type_id<T>()) * 32 + K;
  using element_type = typename detail::storage<T>::type;
  element_type x[num_elements];
};

inline float __float_to_tf32(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;  // to nearest, ties away from zero
  std::memcpy(&x, &u, sizeof x);
  return x;
}

template <typename Use, int M, int N, int K, typename T, typename Layout, typename V>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& v) {
  for (int i = 0; i < f.num_elements; ++i) detail::assign(f.x[i], v);
}

namespace detail {

// Element (r, c) of a matrix at p with leading dimension ldm, row- or column-major.
template <typename E>
E* element(E* p, unsigned ldm, bool row_major, int r, int c) {
  return row_major ? p + static_cast<long long>(r) * ldm + c : p + static_cast<long long>(c) * ldm + r;
}

template <typename F, typename E>
void load(F& f, const E* p, unsigned ldm, bool row_major, int line) {
  simt::matrix_access("wmma::load_matrix_sync", p, ldm, sizeof(E), row_major, line);
  if (simt::lane() == 0) simt::count(simt::Count::kFragmentLoad);
  const int* layout = simt::fragment_layout(F::kind, F::rows, F::cols) + simt::lane() * F::num_elements;
  for (int i = 0; i < F::num_elements; ++i) f.x[i] = *element(p, ldm, row_major, layout[i] / F::cols, layout[i] % F::cols);
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout, typename E>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const E* p, unsigned ldm, int line = __builtin_LINE()) {
  static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load takes a layout_t");
  static_assert(std::is_same<E, typename fragment<Use, M, N, K, T, Layout>::element_type>::value,
                "the memory's element type must be the fragment's");
  detail::load(f, p, ldm, std::is_same<Layout, row_major>::value, line);
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t layout,
                      int line = __builtin_LINE()) {
  detail::load(f, p, ldm, layout == mem_row_major, line);
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout,
                       int line = __builtin_LINE()) {
  using F = fragment<accumulator, M, N, K, float>;
  simt::matrix_access("wmma::store_matrix_sync", p, ldm, sizeof(float), layout == mem_row_major, line);
  const int* own = simt::fragment_layout(F::kind, F::rows, F::cols) + simt::lane() * F::num_elements;
  for (int i = 0; i < F::num_elements; ++i) *detail::element(p, ldm, layout == mem_row_major, own[i] / F::cols, own[i] % F::cols) = f.x[i];
}

// d = a b + c. Two warp collectives: the lanes swap pointers to their fragments, each computes its
// own elements of d into a temporary, and only after the second (when no lane still reads
// another's a, b or c) writes d, which may be c.
template <int M, int N, int K, typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c,
              int line = __builtin_LINE()) {
  using A = fragment<matrix_a, M, N, K, T, LA>;
  using B = fragment<matrix_b, M, N, K, T, LB>;
  using C = fragment<accumulator, M, N, K, float>;
  struct Operands {
    const A* a;
    const B* b;
    const C* c;
  } mine{&a, &b, &c};
  if (simt::lane() == 0) simt::count(simt::Count::kMma);
  std::uint64_t all[32];
  simt::warp_exchange("wmma::mma_sync", 0xffffffffu, reinterpret_cast<std::uintptr_t>(&mine), all, line);
  const int* la = simt::fragment_layout(A::kind, A::rows, A::cols);
  const int* lb = simt::fragment_layout(B::kind, B::rows, B::cols);
  const int* lc = simt::fragment_layout(C::kind, C::rows, C::cols);
  int where_a[M * K], where_b[K * N], where_c[M * N];  // element -> lane * num_elements + slot
  for (int s = 0; s < 32 * A::num_elements; ++s) where_a[la[s]] = s;
  for (int s = 0; s < 32 * B::num_elements; ++s) where_b[lb[s]] = s;
  for (int s = 0; s < 32 * C::num_elements; ++s) where_c[lc[s]] = s;
  auto lane_of = [&](int slot, int n) { return reinterpret_cast<const Operands*>(all[slot / n]); };
  float out[C::num_elements];
  const int* own = lc + simt::lane() * C::num_elements;
  for (int i = 0; i < C::num_elements; ++i) {
    const int r = own[i] / N, col = own[i] % N;
    const int sc = where_c[r * N + col];
    float acc = lane_of(sc, C::num_elements)->c->x[sc % C::num_elements];
    for (int k = 0; k < K; ++k) {
      const int sa = where_a[r * K + k], sb = where_b[k * N + col];
      acc += detail::value(lane_of(sa, A::num_elements)->a->x[sa % A::num_elements], A::tf32) *
             detail::value(lane_of(sb, B::num_elements)->b->x[sb % B::num_elements], B::tf32);
    }
    out[i] = acc;
  }
  simt::vote("wmma::mma_sync", 0xffffffffu, true, line);
  for (int i = 0; i < C::num_elements; ++i) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda
