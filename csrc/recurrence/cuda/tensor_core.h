// What the tensor-core kernels (csrc/recurrence/cuda/cluster_recurrence.cu, grid_recurrence.cu)
// share: the block's thread-block cluster, the operand type of a precision and the rounding to it,
// one warp's 16 x 16 product tile on the tensor cores, and the host side of a cluster launch (the
// clusters a device holds at once, the launch itself). Included by those .cu files only.
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

// A B for one 16 x 16 tile, by one whole warp, handed to store(i, n, value) element by element (each
// lane calls it for the elements it holds): A is 16 x inner, row-major (element (i, k) at
// a[i * lda + k]); B is inner x 16, column-major (element (k, n) at b[n * ldb + k]); inner is a
// multiple of 16, and lda and ldb are multiples of 16 bytes' worth of elements (ldmatrix's rows are
// 16-byte aligned). The operands
// are already rounded to P's type. TF32 and bf16: each k-step one ldmatrix.x4 of A and one of B
// (both n8 halves of the tile) and two mma.sync (m16n8k8 TF32, m16n8k16 bf16: ptx.h), float32
// accumulation; the fragments are the PTX ISA's (ptx.h states them): an ldmatrix matrix of 8 rows
// x 16 bytes is 8 x 4 TF32 or 8 x 8 bf16 elements, and lane l of a matrix holds row l / 4, 16-bit
// columns 2 (l % 4) and 2 (l % 4) + 1 (TF32 element l % 4).
// Multiply false (the GPU probe's ladder, csrc/recurrence/cuda/probe.h): the operands are loaded and
// folded into the accumulator instead of multiplied, so the loads stay and the mma goes.
template <Products P, bool Multiply = true, class Store>
__device__ inline void tile_product(const typename Operand<P>::T* a, unsigned lda, const typename Operand<P>::T* b,
                                    unsigned ldb, int inner, Store&& store) {
  const int lane = threadIdx.x % 32;
  if constexpr (P == Products::kIeee) {
    const int n = lane % 16, i0 = lane / 16 * 8;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int k = 0; k < inner; ++k) {
      const float bk = b[n * ldb + k];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += a[(i0 + i) * lda + k] * bk;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) store(i0 + i, n, acc[i]);
  } else {
    // A's matrices: rows 0-7 and 8-15 (lanes 0-15 give rows lane % 16) at the k-step's first and
    // second 16 bytes (lanes 16-31); B's: n 0-7 at the two 16-byte halves (lanes 0-15), then n 8-15.
    constexpr int kK = P == Products::kTf32 ? 8 : 16, kHalf = kK / 2;
    const auto* a_row = a + (lane % 16) * lda + lane / 16 * kHalf;
    const auto* b_row = b + (lane % 8 + lane / 16 * 8) * ldb + lane / 8 % 2 * kHalf;
    // Two accumulator chains (even and odd k-steps), each over both n8 halves: no mma waits on the
    // one before it in the same chain for more than every other k-step; summed at the end.
    float acc[2][2][4] = {};
    auto k_step = [&](float (&sum)[2][4], int k) {
      std::uint32_t fa[4], fb[4];
      ptx::ldmatrix<4>(fa, a_row + k);
      ptx::ldmatrix<4>(fb, b_row + k);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const std::uint32_t fbh[2] = {fb[2 * half], fb[2 * half + 1]};
        if constexpr (!Multiply) {  // the operands' bits folded (a shallow tree of integer ops) into the accumulator
          sum[half][0] += static_cast<float>((fa[0] ^ fa[1] ^ fa[2] ^ fa[3] ^ fbh[0] ^ fbh[1]) & 1u);
        } else if constexpr (P == Products::kTf32) {
          ptx::mma_tf32(sum[half], fa, fbh, sum[half]);
        } else {
          ptx::mma_bf16(sum[half], fa, fbh, sum[half]);
        }
      }
    };
    int k = 0;
    for (; k + kK < inner; k += 2 * kK) {
      k_step(acc[0], k);
      k_step(acc[1], k + kK);
    }
    if (k < inner) k_step(acc[0], k);  // an odd number of k-steps (bf16)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[0][half][e] += acc[1][half][e];
    }
    // acc[0][half][e] is element (lane / 4 + 8 (e / 2), 8 half + 2 (lane % 4) + e % 2) of the tile.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int e = 0; e < 4; ++e) store(lane / 4 + 8 * (e / 2), 8 * half + 2 * (lane % 4) + e % 2, acc[0][half][e]);
    }
  }
}

// tile_product into a column-major 16 x 16 tile of floats: element (i, n) at out[n * ldo + i].
template <Products P, bool Multiply = true>
__device__ inline void tile_product(const typename Operand<P>::T* a, unsigned lda, const typename Operand<P>::T* b,
                                    unsigned ldb, int inner, float* out, unsigned ldo) {
  tile_product<P, Multiply>(a, lda, b, ldb, inner, [&](int i, int n, float v) { out[n * ldo + i] = v; });
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

// -- the host side ----------------------------------------------------------------------------------
inline int operand_bytes(Products products) { return products == Products::kBf16 ? 2 : 4; }

// kPad of products P at run time: the padded pitch of an operand tile's rows is length + pad_of(P).
inline int pad_of(Products products) { return 16 / operand_bytes(products); }

inline int round_up(int x, int to) { return (x + to - 1) / to * to; }

// How many clusters of `cluster` blocks of `threads` threads of `kernel` with `bytes` of dynamic shared memory the
// current device holds at once (its opt-in shared memory limit `optin` set on the kernel first).
template <typename Kernel>
cudaError_t resident_clusters(Kernel kernel, int threads, int optin, int cluster, std::size_t bytes, int* count) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  if (err != cudaSuccess) return err;
  if (cluster == 1) {  // blocks per multiprocessor times multiprocessors (no cluster query before sm_90)
    int device = 0, sms = 0, per_sm = 0;
    err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes);
    *count = sms * per_sm;
    return err;
  }
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(cluster);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = bytes;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = cluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaOccupancyMaxActiveClusters(count, kernel, &config);
}

// One launch of `blocks` blocks of `threads` threads in clusters of `cluster` with `bytes` of dynamic
// shared memory on `stream`; `cooperative`: the launch fails unless every block is resident at once
// (what a kernel whose blocks wait for each other needs).
template <typename... P, typename... A>
cudaError_t launch_clusters(void (*kernel)(P...), int blocks, int threads, int cluster, std::size_t bytes, bool cooperative,
                            cudaStream_t stream, A&&... args) {
  if (cluster < 1 || blocks < 1 || blocks % cluster != 0) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned count = 0;
  if (cluster > 1) {  // a cluster of one needs no attribute (and a GPU before sm_90 takes none)
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = cluster;
    attribute[count].val.clusterDim.y = 1;
    attribute[count++].val.clusterDim.z = 1;
  }
  if (cooperative) {
    attribute[count].id = cudaLaunchAttributeCooperative;
    attribute[count++].val.cooperative = 1;
  }
  config.attrs = attribute;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, std::forward<A>(args)...);
}

// launch_clusters of a kernel no plan checked (Checked false: the GPU probe's ladder rungs, probe.h)
// after setting what a plan's resident_clusters sets on the kernels it checks: `bytes` of dynamic
// shared memory and, past 8 blocks, a non-portable cluster size.
template <bool Checked, typename... P, typename... A>
cudaError_t launch(void (*kernel)(P...), int blocks, int threads, int cluster, std::size_t bytes, bool cooperative,
                   cudaStream_t stream, A&&... args) {
  if constexpr (!Checked) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (err == cudaSuccess && cluster > 1) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err != cudaSuccess) return err;
  }
  return launch_clusters(kernel, blocks, threads, cluster, bytes, cooperative, stream, std::forward<A>(args)...);
}
}  // namespace tensor_core
}  // namespace cuda
}  // namespace tsrnn
