// The grid-resident kernel's load of a step's operand slice (csrc/recurrence/cuda/grid_recurrence.cu):
// the rows of h_{t-1} (forward) or dz_{t+1} (backward) that a block multiplies, read from L2 (other
// blocks wrote them in this launch) into a tile of shared memory in the operand type, its rows
// `pitch` elements apart,
//
//   x[n * pitch + k] = round(src[n * ld + k])   for n < rows and k < cols,
//                      0                        for rows <= n < padded or cols <= k < width,
//
// V floats at a time (16-byte loads where V = 4, 8-byte where V = 2: vector_width says which the
// row pitch and the pointers allow), kBatch loads issued before the first is used, and no integer
// divide in the loop: a block's threads walk the tile's vectors in order, thread i from vector i
// in steps of blockDim.x vectors, each step a fixed number of rows and vectors (Walk, set up once per
// launch).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "recurrence/cuda/tensor_core.h"

namespace tsrnn {
namespace cuda {
namespace grid {

// Bytes as one access: a load of V floats from global memory (4, 8 or 16 bytes), a store of their V
// rounded operands into shared memory (2 to 16 bytes).
template <int Bytes>
struct Word;
template <>
struct Word<2> {
  using T = unsigned short;
};
template <>
struct Word<4> {
  using T = unsigned;
};
template <>
struct Word<8> {
  using T = uint2;
};
template <>
struct Word<16> {
  using T = uint4;
};

// The widest V in {4, 2, 1} that divides the row pitch `ld` (in floats) and the `count` base
// pointers' addresses in floats: every vector of every row of a slice is then V-aligned (the
// slices start at multiples of 16 columns and at whole rows). Host side.
inline int vector_width(long long ld, const void* const* pointers, int count) {
  for (int v = 4; v > 1; v /= 2) {
    bool fits = ld % v == 0;
    for (int i = 0; i < count && fits; ++i) fits = reinterpret_cast<std::uintptr_t>(pointers[i]) % (v * sizeof(float)) == 0;
    if (fits) return v;
  }
  return 1;
}

// A thread's walk over a tile of `per_row` vectors a row: it starts at vector threadIdx.x (row n,
// vector k of the row) and steps blockDim.x vectors, dn rows and dk vectors (dk < per_row: one
// carry at most).
struct Walk {
  int n, k, dn, dk, per_row;
};

__device__ inline Walk walk_of(int per_row) {
  const int i = static_cast<int>(threadIdx.x), step = static_cast<int>(blockDim.x);
  return {i / per_row, i % per_row, step / per_row, step % per_row, per_row};
}

constexpr int kBatch = 8;  // loads a thread issues before it uses the first

// x [padded][pitch] from src (row pitch ld floats), V floats a load, along `walk` (per_row = width / V).
template <Products P, int V>
__device__ inline void load_slice(typename tensor_core::Operand<P>::T* x, unsigned pitch, const float* src,
                                  long long ld, int rows, int padded, int width, int cols, Walk walk) {
  using T = typename tensor_core::Operand<P>::T;
  using Vector = typename Word<V * sizeof(float)>::T;
  using Stored = typename Word<V * sizeof(T)>::T;
  const int vectors = cols / V;  // real vectors a row (cols is a multiple of V)
  int n = walk.n, k = walk.k;
  while (n < padded) {
    Vector v[kBatch];
    int to[kBatch];  // the vector's first element in x, or -1 past the tile
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      to[i] = n < padded ? n * static_cast<int>(pitch) + k * V : -1;
      if (n < rows && k < vectors) {
        v[i] = __ldcg(reinterpret_cast<const Vector*>(src + n * ld + k * V));
      } else {
        v[i] = Vector{};
      }
      k += walk.dk;
      n += walk.dn;
      if (k >= walk.per_row) {
        k -= walk.per_row;
        ++n;
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (to[i] < 0) continue;
      float f[V];
      memcpy(f, &v[i], sizeof(f));
      T rounded[V];
#pragma unroll
      for (int e = 0; e < V; ++e) rounded[e] = tensor_core::Operand<P>::round(f[e]);
      Stored word;
      memcpy(&word, rounded, sizeof(word));
      *reinterpret_cast<Stored*>(x + to[i]) = word;
    }
  }
}

// load_slice at the launch's vector width V (4, 2 or 1).
template <Products P>
__device__ inline void load_slice(int V, typename tensor_core::Operand<P>::T* x, unsigned pitch, const float* src,
                                  long long ld, int rows, int padded, int width, int cols, Walk walk) {
  if (V == 4) {
    load_slice<P, 4>(x, pitch, src, ld, rows, padded, width, cols, walk);
  } else if (V == 2) {
    load_slice<P, 2>(x, pitch, src, ld, rows, padded, width, cols, walk);
  } else {
    load_slice<P, 1>(x, pitch, src, ld, rows, padded, width, cols, walk);
  }
}

}  // namespace grid
}  // namespace cuda
}  // namespace tsrnn
