// A warp's fragment stream, the grid kernel's products (grid_recurrence.cu) on tensor_core.h's
// warp tiles: the Stream of a product's A fragments (held in registers, the rest in shared-memory
// slots), one warp's part of it (WarpStream), the slots' layout, their loading and storing, and the
// product over a warp's stream (stream_product).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "recurrence/cuda/tensor_core.h"
#include "recurrence/products.h"

namespace tsrnn {
namespace cuda {
namespace tensor_core {

// -- a warp's fragment stream (the grid kernel's products) ----------------------------------------
// C = A B with A [16 m_tiles][k_steps k-steps] kept on chip for the whole kernel as fragments (one
// k-step of one m-tile: 16 rows of 32 bytes, the A operand of one mma). Warp w owns the m-tiles w,
// w + warps, ... and walks their fragments in order, m-tile by m-tile and k-step by k-step: its
// stream. The first kHeldSegments x kHeldSteps fragments of a warp's stream stay in registers
// (Held: fragment 8 j + k in held[j][k]) where the products are on tensor cores; the rest lie in
// shared memory, the warp's in stream order from its first_unheld(warp)-th fragment slot, each slot
// [2 halves][16 rows][16 bytes] (512 bytes: an ldmatrix.x4's four 8 x 16-byte matrices each 128
// contiguous bytes, one wavefront each). One m-tile's accumulators run over all of K in one warp,
// so no partial sums over K are kept anywhere.
struct Stream {
  int m_tiles = 0, k_steps = 0, warps = 0;
  bool holds = false;  // the products are on tensor cores (TF32, bf16): a warp holds its first fragments

  static constexpr int kHeld = kHeldSegments * kHeldSteps;  // fragments a warp holds
  static constexpr int kSlotBytes = 512;                    // a fragment in shared memory

  __host__ __device__ int owned(int warp) const { return warp < m_tiles ? (m_tiles - warp + warps - 1) / warps : 0; }
  __host__ __device__ int length(int warp) const { return owned(warp) * k_steps; }
  __host__ __device__ int held(int warp) const {
    return holds ? (length(warp) < kHeld ? length(warp) : kHeld) : 0;
  }
  __host__ __device__ int unheld(int warp) const { return length(warp) - held(warp); }
  __host__ __device__ int first_unheld(int warp) const {
    int first = 0;
    for (int v = 0; v < warp; ++v) first += unheld(v);
    return first;
  }
  __host__ __device__ int slots() const { return first_unheld(warps); }  // fragments in shared memory
};

// One warp's part of a Stream, worked out once before a kernel's time loop (whose products then
// divide nothing): the warp, its fragments, how many it holds, its first slot.
struct WarpStream {
  int warp, length, held, first_slot;
};

__host__ __device__ inline WarpStream warp_stream(const Stream& stream, int warp) {
  return {warp, stream.length(warp), stream.held(warp), stream.first_unheld(warp)};
}

// Elements of a fragment slot, and where element (row r, column c of the k-step) of a fragment lies
// in its slot: half c / (kK / 2) of 256 bytes, row r of 16 bytes.
template <Products P>
inline constexpr int kSlotElements = Stream::kSlotBytes / static_cast<int>(sizeof(typename Operand<P>::T));

template <Products P>
__host__ __device__ inline int slot_offset(int r, int c) {
  constexpr int half = kK<P> / 2;
  return c / half * (kSlotElements<P> / 2) + r * half + c % half;
}

// The fragment in slot `slot` by ldmatrix.x4: lane l reads row l % 16 of half l / 16.
template <Products P>
__device__ inline void load_slot(std::uint32_t (&fa)[4], const typename Operand<P>::T* slot) {
  const int lane = threadIdx.x % 32;
  ptx::ldmatrix<4>(fa, slot + lane / 16 * (kSlotElements<P> / 2) + lane % 16 * (kK<P> / 2));
}

// Writes fragments [first, last) of warp `warp`'s stream into consecutive slots from `slots`, their
// elements value(row, column) of A, by the warp's lanes.
template <Products P, class Value>
__device__ inline void store_fragments(typename Operand<P>::T* slots, const Stream& stream, int warp, int first, int last,
                                       Value&& value) {
  const int lane = threadIdx.x % 32;
  for (int idx = lane; idx < (last - first) * 16 * kK<P>; idx += 32) {
    const int f = first + idx / (16 * kK<P>), r = idx / kK<P> % 16, c = idx % kK<P>;
    const int mt = warp + f / stream.k_steps * stream.warps, k = f % stream.k_steps;
    slots[(f - first) * kSlotElements<P> + slot_offset<P>(r, c)] =
        Operand<P>::round(value(16 * mt + r, k * kK<P> + c));
  }
}

// Warp `warp`'s held fragments (its first stream.held(warp)), from value(row, column) of A staged
// through `staging` (kHeldSteps slots a warp: kHeldSteps x 512 bytes x warps), a block barrier
// after each of the kHeldSegments rounds. Every thread of the block calls it.
template <Products P, class Value>
__device__ inline void hold_stream(Held& held, typename Operand<P>::T* staging, const Stream& stream, int warp,
                                   Value&& value) {
  if constexpr (P != Products::kIeee) {
    auto* mine = staging + warp * kHeldSteps * kSlotElements<P>;
#pragma unroll
    for (int j = 0; j < kHeldSegments; ++j) {
      const int first = j * kHeldSteps, last = min(stream.held(warp), first + kHeldSteps);
      if (first < last) store_fragments<P>(mine, stream, warp, first, last, value);
      __syncthreads();  // the round's slots written
#pragma unroll
      for (int k = 0; k < kHeldSteps; ++k) {
        if (first + k < last) load_slot<P>(held[j][k], mine + k * kSlotElements<P>);
      }
      __syncthreads();  // the round's slots read: the next round (or the caller) may overwrite them
    }
  }
}

// acc[t][e] of m-tile mt handed to store(16 mt + i, n, value), (i, n) as mma.sync's C fragment.
template <class Store>
__device__ inline void emit(float (&acc)[kMaxNTiles][4], int mt, int n_tiles, Store& store) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < kMaxNTiles; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (t < n_tiles) store(mt * 16 + lane / 4 + 8 * (e / 2), 8 * t + 2 * (lane % 4) + e % 2, acc[t][e]);
      acc[t][e] = 0.f;
    }
  }
}

// Warp own.warp's m-tiles of C = A B for the n_tiles (<= kMaxNTiles) n8 tiles of B at b
// (column-major: element (k, n) at b[n * ldb + k]), handed to store(row, n, value): its held
// fragments from `held`, the rest from its slots at `slots` (the block's slot 0; hold_stream,
// store_fragments). kIeee: a scalar float32 loop over the same stream, every fragment from its slot.
template <Products P, bool Multiply = true, class Store>
__device__ inline void stream_product(const Held& held, const typename Operand<P>::T* slots,
                                      const typename Operand<P>::T* b, unsigned ldb, int n_tiles, const Stream& stream,
                                      const WarpStream& own, Store&& store) {
  const int length = own.length, lane = threadIdx.x % 32;
  const auto* mine = slots + own.first_slot * kSlotElements<P>;
  float acc[kMaxNTiles][4] = {};
  int mt = own.warp, k = 0;  // the m-tile and k-step of the next fragment
  auto next = [&]() {
    if (++k == stream.k_steps) {
      emit(acc, mt, n_tiles, store);
      k = 0;
      mt += stream.warps;
    }
  };
  if constexpr (P == Products::kIeee) {
    for (int f = 0; f < length; ++f) {
      const auto* slot = mine + f * kSlotElements<P>;
      for (int c = 0; c < kK<P>; ++c) {
        const float a0 = slot[slot_offset<P>(lane / 4, c)], a1 = slot[slot_offset<P>(lane / 4 + 8, c)];
#pragma unroll
        for (int t = 0; t < kMaxNTiles; ++t) {
#pragma unroll
          for (int e = 0; e < 4 && t < n_tiles; ++e) {
            acc[t][e] += (e / 2 ? a1 : a0) * b[(8 * t + 2 * (lane % 4) + e % 2) * ldb + k * kK<P> + c];
          }
        }
      }
      next();
    }
  } else {
    const int kept = own.held;
#pragma unroll
    for (int j = 0; j < kHeldSegments; ++j) {
#pragma unroll
      for (int i = 0; i < kHeldSteps; ++i) {
        if (j * kHeldSteps + i < kept) {
          k_step<P, Multiply>(acc, held[j][i], b, ldb, k * kK<P>, n_tiles);
          next();
        }
      }
    }
    for (int f = kept; f < length; ++f) {
      std::uint32_t fa[4];
      load_slot<P>(fa, mine + (f - kept) * kSlotElements<P>);
      k_step<P, Multiply>(acc, fa, b, ldb, k * kK<P>, n_tiles);
      next();
    }
  }
}

}  // namespace tensor_core
}  // namespace cuda
}  // namespace tsrnn
