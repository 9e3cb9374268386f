// What the tensor-core kernels (csrc/recurrence/cuda/cluster_recurrence.cu, grid_recurrence.cu)
// share: the block's thread-block cluster, the operand type of a precision and the rounding to it,
// a block's products on the tensor cores (the cluster kernel's segments dealt to its warps, the grid
// kernel's fragment streams, W fragments held in registers either way), and the host side of a cluster launch (the clusters a device
// holds at once, the launch itself). Included by those .cu files only. The grid kernel's fragment
// streams are in fragment_stream.h (which includes this file), the host side of a cluster launch in
// tensor_core_launch.h (included here).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "recurrence/cuda/ptx.h"
#include "recurrence/cuda/tensor_core_launch.h"
#include "recurrence/products.h"

namespace tsrnn {
namespace cuda {
namespace tensor_core {

namespace cg = cooperative_groups;

// The block's cluster (cooperative_groups' cluster_group, sm_90 on). Before sm_90 there are no
// clusters and the plan launches clusters of one block: a cluster of one, whose barrier phases are
// block barriers (arrive is a no-op, wait is __syncthreads) and whose only rank is the block's own.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
struct Cluster {
  __device__ static unsigned num_blocks() { return 1; }
  __device__ static unsigned block_rank() { return 0; }
  __device__ static void barrier_arrive() {}
  __device__ static void barrier_wait() { __syncthreads(); }
  __device__ static void sync() { __syncthreads(); }
  template <typename T>
  __device__ static T* map_shared_rank(T* address, int /*rank*/) {
    return address;
  }
};
__device__ inline Cluster this_cluster() { return {}; }
#else
using Cluster = cg::cluster_group;
__device__ inline Cluster this_cluster() { return cg::this_cluster(); }
#endif

// cluster.barrier_wait() and cluster.sync() called for the source line `line` of `file`: the SIMT
// emulation's planted-bug tests remove one barrier by its caller's line (tests/simt/simt.h's
// set_drop), which a helper that waits for its caller passes on; on a GPU both are unused.
__device__ inline void wait_at(Cluster& cluster, [[maybe_unused]] int line, [[maybe_unused]] const char* file) {
#ifdef TSRNN_SIMT
  cluster.barrier_wait(line, file);
#else
  cluster.barrier_wait();
#endif
}

__device__ inline void sync_at(Cluster& cluster, [[maybe_unused]] int line, [[maybe_unused]] const char* file) {
#ifdef TSRNN_SIMT
  cluster.sync(line, file);
#else
  cluster.sync();
#endif
}

// The operand type of products P and the rounding of a float32 value to it.
template <Products P>
struct Operand {
  using T = float;
  __device__ static float round(float x) { return x; }
};
template <>
struct Operand<Products::kTf32> {
  using T = float;
  __device__ static float round(float x) { return ptx::round_tf32(x); }
};
template <>
struct Operand<Products::kBf16> {
  using T = __nv_bfloat16;
  __device__ static __nv_bfloat16 round(float x) { return __float2bfloat16(x); }
};

// The padding, in elements, of a row of an operand tile in shared memory: one group of 4 banks (16
// bytes). The unpadded rows are multiples of 32 bytes long, so a padded pitch is an odd number of
// 16-byte groups and the 8 rows of an ldmatrix matrix fall in 8 different bank groups (one
// wavefront; unpadded, 2 to 8).
template <Products P>
inline constexpr int kPad = 16 / static_cast<int>(sizeof(typename Operand<P>::T));

// A fragment element's bits (tf32 fragments hold floats, bf16 ones bfloat16).
template <typename T>
__device__ inline unsigned bits(T x) {
  unsigned b = 0;
  memcpy(&b, &x, sizeof(T));
  return b;
}

// -- the products --------------------------------------------------------------------------------
// C = A B by the warps of a block, on tensor cores: A is M x K, row-major (element (i, k) at
// a[i * lda + k]); B is K x N, column-major (element (k, n) at b[n * ldb + k], the batch rows of an
// operand tile); M a multiple of 16, N of 8 (n8 tiles, at most kMaxNTiles), K of the k-step kK
// (TF32: mma.sync m16n8k8, kK = 8; bf16: m16n8k16, kK = 16; ptx.h states their fragments); lda and
// ldb multiples of 16 bytes' worth of elements (ldmatrix rows are 16-byte aligned); the operands
// already rounded to P's type. The product is cut into segments: segment s is m-tile s % m_tiles
// (rows [16 mt, 16 mt + 16)) over part s / m_tiles of K (k-steps [part L, min(k_steps, part L + L)),
// L = Split::length), each computed by one warp for all N's n8 tiles into float32 accumulators, one
// chain of at most L dependent mma a tile; the parts of an element are summed by the caller (a
// shared-memory reduction, in a fixed order). Segment s runs on warp s % warps. A warp's first
// kHeldSegments segments keep the A fragments of their first kHeldSteps k-steps in registers for
// the whole kernel (Held), the rest are read each time by ldmatrix.x4; B is read by ldmatrix.x4
// (two n8 tiles a k-step; an odd last tile .x2).
// kIeee (callers that turned TF32 off): a scalar float32 loop over the same segments and
// accumulator layout, A read from shared memory.
constexpr int kMaxNTiles = 4;     // n8 tiles of a product: batch tiles of up to 32 rows
constexpr int kHeldSegments = 3;  // segments a warp holds A fragments of
constexpr int kHeldSteps = 8;     // k-steps a held segment holds (kHeldSegments x kHeldSteps x 4 registers)

template <Products P>
inline constexpr int kK = P == Products::kBf16 ? 16 : 8;  // elements of a k-step (32 bytes of a row either way)

// The segments of one product (host and device): m_tiles x parts segments of at most `length` k-steps.
struct Split {
  int m_tiles = 0, n_tiles = 0, k_steps = 0, parts = 0, length = 0;
  __host__ __device__ int segments() const { return m_tiles * parts; }
  __host__ __device__ int m_tile(int s) const { return s % m_tiles; }
  __host__ __device__ int part(int s) const { return s / m_tiles; }
  __host__ __device__ int first(int s) const { return part(s) * length; }
  __host__ __device__ int last(int s) const { return first(s) + length < k_steps ? first(s) + length : k_steps; }
};

// A product of m_tiles x n_tiles tiles over k_steps in at most `parts` parts, each of ceil(k_steps /
// parts) k-steps (and so as many parts as that length needs: none empty).
__host__ __device__ inline Split split(int m_tiles, int n_tiles, int k_steps, int parts) {
  const int length = (k_steps + parts - 1) / parts;
  return Split{m_tiles, n_tiles, k_steps, (k_steps + length - 1) / length, length};
}

// A warp's held A fragments: held[s][k] of its segment s (s < kHeldSegments), k-step first + k.
using Held = std::uint32_t[kHeldSegments][kHeldSteps][4];

// A's fragment of the k-step at element k of the m-tile's rows a: ldmatrix.x4 of its four 8 x 16-byte
// matrices, rows 0-7 and 8-15 (lanes 0-15: row lane % 16) at the k-step's first and second 16 bytes
// (lanes 16-31).
template <Products P>
__device__ inline void load_a(std::uint32_t (&fa)[4], const typename Operand<P>::T* a, unsigned lda, int k) {
  const int lane = threadIdx.x % 32;
  ptx::ldmatrix<4>(fa, a + (lane % 16) * lda + lane / 16 * (kK<P> / 2) + k);
}

// Loads the held fragments of warp `warp`'s segments of `split` (A's m-tile mt at a + 16 mt lda).
template <Products P>
__device__ inline void hold(Held& held, const typename Operand<P>::T* a, unsigned lda, const Split& split, int warp,
                            int warps) {
  if constexpr (P != Products::kIeee) {
#pragma unroll
    for (int i = 0; i < kHeldSegments; ++i) {
      const int s = warp + i * warps;
#pragma unroll
      for (int k = 0; k < kHeldSteps; ++k) {
        if (s < split.segments() && split.first(s) + k < split.last(s)) {
          load_a<P>(held[i][k], a + split.m_tile(s) * 16 * lda, lda, (split.first(s) + k) * kK<P>);
        }
      }
    }
  }
}

// acc[t] += A's k-step (fragment fa) times B's n8 tile t at element k, t < n_tiles: B's matrices
// by ldmatrix, n 8 t + lane % 8 at the k-step's first (lanes 0-7, 16-23) and second 16 bytes.
// Multiply false (the GPU probe's ladder, csrc/recurrence/cuda/probe.h): the operands are loaded and
// folded into the accumulator instead of multiplied, so the loads stay and the mma goes.
template <Products P, bool Multiply>
__device__ inline void k_step(float (&acc)[kMaxNTiles][4], const std::uint32_t (&fa)[4], const typename Operand<P>::T* b,
                              unsigned ldb, int k, int n_tiles) {
  const int lane = threadIdx.x % 32;
  const auto* b_row = b + (lane % 8 + lane / 16 * 8) * ldb + lane / 8 % 2 * (kK<P> / 2) + k;
  auto mma = [&](float (&sum)[4], std::uint32_t b0, std::uint32_t b1) {
    const std::uint32_t fb[2] = {b0, b1};
    if constexpr (!Multiply) {  // the operands' bits folded (a shallow tree of integer ops) into the accumulator
      sum[0] += static_cast<float>((fa[0] ^ fa[1] ^ fa[2] ^ fa[3] ^ b0 ^ b1) & 1u);
    } else if constexpr (P == Products::kTf32) {
      ptx::mma_tf32(sum, fa, fb, sum);
    } else {
      ptx::mma_bf16(sum, fa, fb, sum);
    }
  };
#pragma unroll
  for (int t = 0; t < kMaxNTiles; t += 2) {
    if (t + 1 < n_tiles) {
      std::uint32_t fb[4];
      ptx::ldmatrix<4>(fb, b_row + 8 * t * ldb);
      mma(acc[t], fb[0], fb[1]);
      mma(acc[t + 1], fb[2], fb[3]);
    } else if (t < n_tiles) {
      std::uint32_t fb[2];
      ptx::ldmatrix<2>(fb, b_row + 8 * t * ldb);
      mma(acc[t], fb[0], fb[1]);
    }
  }
}

// Segment s of `split` by the whole warp: acc[t][e], element (16 mt + i, n) with (i, n) = (lane / 4
// + 8 (e / 2), 8 t + 2 (lane % 4) + e % 2) of C's m-tile mt, is handed to store(part, 16 mt + i, n,
// value) (n < 8 n_tiles; the caller sums the parts). Holds: `held` are the warp's fragments of this
// segment (its first kHeldSteps k-steps; the rest are loaded).
template <Products P, bool Multiply, bool Holds, class Store>
__device__ inline void segment_product(const std::uint32_t (&held)[kHeldSteps][4], const typename Operand<P>::T* a,
                                       unsigned lda, const typename Operand<P>::T* b, unsigned ldb, const Split& split,
                                       int s, Store&& store) {
  const int lane = threadIdx.x % 32;
  const int first = split.first(s), last = split.last(s);
  const auto* a_tile = a + split.m_tile(s) * 16 * lda;
  float acc[kMaxNTiles][4] = {};
  if constexpr (P == Products::kIeee) {
    for (int k = first * kK<P>; k < last * kK<P>; ++k) {
      const float a0 = a_tile[(lane / 4) * lda + k], a1 = a_tile[(lane / 4 + 8) * lda + k];
#pragma unroll
      for (int t = 0; t < kMaxNTiles; ++t) {
#pragma unroll
        for (int e = 0; e < 4 && t < split.n_tiles; ++e) {
          acc[t][e] += (e / 2 ? a1 : a0) * b[(8 * t + 2 * (lane % 4) + e % 2) * ldb + k];
        }
      }
    }
  } else {
    int k = first;
    if constexpr (Holds) {
#pragma unroll
      for (int i = 0; i < kHeldSteps; ++i) {
        if (first + i < last) k_step<P, Multiply>(acc, held[i], b, ldb, (first + i) * kK<P>, split.n_tiles);
      }
      k += kHeldSteps;
    }
    for (; k < last; ++k) {
      std::uint32_t fa[4];
      load_a<P>(fa, a_tile, lda, k * kK<P>);
      k_step<P, Multiply>(acc, fa, b, ldb, k * kK<P>, split.n_tiles);
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxNTiles; ++t) {
#pragma unroll
    for (int e = 0; e < 4 && t < split.n_tiles; ++e) {
      store(split.part(s), split.m_tile(s) * 16 + lane / 4 + 8 * (e / 2), 8 * t + 2 * (lane % 4) + e % 2, acc[t][e]);
    }
  }
}

// Every segment of `split` that runs on warp `warp` of `warps`, the held ones from `held` (hold()).
template <Products P, bool Multiply = true, class Store>
__device__ inline void product(const Held& held, const typename Operand<P>::T* a, unsigned lda,
                               const typename Operand<P>::T* b, unsigned ldb, const Split& split, int warp, int warps,
                               Store&& store) {
#pragma unroll
  for (int i = 0; i < kHeldSegments; ++i) {
    const int s = warp + i * warps;
    if (s < split.segments()) segment_product<P, Multiply, true>(held[i], a, lda, b, ldb, split, s, store);
  }
  for (int s = warp + kHeldSegments * warps; s < split.segments(); s += warps) {
    segment_product<P, Multiply, false>(held[0], a, lda, b, ldb, split, s, store);
  }
}

// Pair i of a thread: the (unit, row) pairs of `units` units x `rows` batch rows, numbered q = u +
// n * units, are dealt to the threads in turn, `stride` at a time, this thread's first being
// first + threadIdx.x (a block's own: first 0, stride its threads; a cluster's: first its rank's
// threads, stride the cluster's). `valid` is false past the pairs (and where there is no unit).
struct Pair {
  int u, n;
  bool valid;
};

__device__ inline Pair pair(int i, int first, int stride, int units, int rows) {
  const int q = first + static_cast<int>(threadIdx.x) + i * stride;
  return {units > 0 ? q % units : 0, units > 0 ? q / units : rows, units > 0 && q < units * rows};
}

}  // namespace tensor_core
}  // namespace cuda
}  // namespace tsrnn
