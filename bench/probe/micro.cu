// The GPU probe's microbenchmarks of the Hopper primitives the second-generation tensor-core kernels
// rely on (what each measures: micro.h; how to read the numbers: micro.py). One kernel each, timed
// by one thread with %globaltimer and clock64 around a loop of `iters` operations, `reps` times.
// Under the SIMT emulation (tests/simt) the same source runs on the CPU: the times are a counter
// there and mean nothing, the checks and the code paths are the point.
#include <cooperative_groups.h>
#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <cstring>

#include "micro.h"
#include "recurrence/cuda/device_common.h"
#include "recurrence/cuda/flag_barrier.h"
#include "recurrence/cuda/ptx.h"
#include "recurrence/cuda/tensor_core.h"

namespace tsrnn_micro {
namespace {

namespace cg = cooperative_groups;
namespace ptx = tsrnn::cuda::ptx;
namespace wmma = nvcuda::wmma;
using tsrnn::cuda::dynamic_shared;
using tsrnn::cuda::tensor_core::launch_clusters;

constexpr int kThreads = 128;
constexpr unsigned long long kTimeoutNs = 2000000000ull;  // a wait longer than 2 s on the GPU is a failure

struct Stamp {
  unsigned long long ns, cycles;
};

__device__ Stamp stamp() { return {ptx::globaltimer(), ptx::clock()}; }

__device__ void record(Times* times, int rep, Stamp start) {
  const Stamp end = stamp();
  times[2 * rep] = end.ns - start.ns;
  times[2 * rep + 1] = end.cycles - start.cycles;
}

// --- 1. cluster barrier ---------------------------------------------------------------------------
// Each iteration: `stores` coalesced global stores a thread, an arrive (relaxed or release), a wait.
// The check: every thread's last stores hold its last iteration, and thread 0 of each block writes
// its iteration count after the stores (scratch's last `cluster` floats), all equal for the host.
// No other barrier and no DSMEM: the relaxed kernel's SASS holds no MEMBAR.ALL.GPU at all.
template <bool Relaxed>
__global__ void __launch_bounds__(kThreads) cluster_barrier_kernel(int stores, int iters, int reps, float* scratch, Times* times,
                                                                   int* wrong) {
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  float* mine = scratch + static_cast<long long>(rank) * stores * kThreads + threadIdx.x;
  unsigned done = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const Stamp start = stamp();
    for (int i = 0; i < iters; ++i, ++done) {
      for (int s = 0; s < stores; ++s) mine[s * kThreads] = static_cast<float>(done);
      if constexpr (Relaxed) {
        ptx::cluster_arrive_relaxed();
      } else {
        cluster.barrier_arrive();
      }
      cluster.barrier_wait();
    }
    if (rank == 0 && threadIdx.x == 0) record(times, rep, start);
  }
  for (int s = 0; s < stores; ++s) {
    if (mine[s * kThreads] != static_cast<float>(done - 1)) *wrong = 1;
  }
  if (threadIdx.x == 0) scratch[static_cast<long long>(cluster.num_blocks()) * stores * kThreads + rank] = static_cast<float>(done);
}

// --- 2. DSMEM ping-pong ---------------------------------------------------------------------------
// Shared memory: an mbarrier (expecting 1 arrival and 4 bytes a phase) and the slot the peer
// pushes into. Round r: rank 0 pushes 2r + 1 and waits for the reply 2r + 2; rank 1 waits for
// 2r + 1 and replies. Each block checks every value it receives.
// Polls the mbarrier until the phase of `parity` completes; false after kTimeoutNs on the GPU.
__device__ bool await(std::uint64_t* bar, unsigned parity) {
#ifdef TSRNN_SIMT
  simt::label("mbarrier phase parity", parity);
#endif
  const unsigned long long start = ptx::globaltimer();
  while (!ptx::mbarrier_try_wait_parity(bar, parity)) {
    if (ptx::globaltimer() - start > kTimeoutNs) return false;
  }
  return true;
}

__global__ void dsmem_pingpong_kernel(int iters, int reps, Times* times, int* wrong) {
  cg::cluster_group cluster = cg::this_cluster();
  auto* bar = dynamic_shared<std::uint64_t>();
  auto* slot = reinterpret_cast<std::uint32_t*>(bar + 1);
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(bar, 1);
    ptx::fence_mbarrier_init();
  }
  cluster.sync();
  if (threadIdx.x == 0) {
    const std::uint32_t peer_slot = ptx::mapa(ptx::shared_address(slot), rank ^ 1u);
    const std::uint32_t peer_bar = ptx::mapa(ptx::shared_address(bar), rank ^ 1u);
    unsigned round = 0;
    int bad = 0;  // 1: a wrong value, 2: a wait timed out (the peer then times out too)
    for (int rep = 0; rep < reps && !bad; ++rep) {
      const Stamp start = stamp();
      for (int i = 0; i < iters && !bad; ++i, ++round) {
        ptx::mbarrier_arrive_expect_tx(bar, sizeof(std::uint32_t));
        if (rank == 0) ptx::st_async(peer_slot, 2 * round + 1, peer_bar);
        if (!await(bar, round & 1u)) bad = 2;
        if (!bad && *slot != 2 * round + 2 - rank) bad = 1;  // rank 0 gets the reply, rank 1 the push
        if (rank == 1 && !bad) ptx::st_async(peer_slot, 2 * round + 2, peer_bar);
      }
      if (rank == 0) record(times, rep, start);
    }
    if (bad) *wrong = bad;
  }
  cluster.sync();  // no block exits while its peer may still push into it
}

// --- 3. flag barrier ------------------------------------------------------------------------------
// Before each phase k a block writes k into its slot; after the barrier it reads its neighbour's
// slot, which must hold at least k (one L2 read per round trip, part of the time).
__device__ void poll(unsigned long long* counter, unsigned long long target) {
  ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> count(*counter);
  while (count.load(::cuda::memory_order_acquire) < target) __nanosleep(tsrnn::cuda::FlagBarrier::kPollNanoseconds);
}

__global__ void __launch_bounds__(kThreads) flag_barrier_kernel(int mode, int iters, int reps, unsigned long long* counters,
                                                                unsigned* slots, Times* times, int* wrong) {
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned blocks = gridDim.x, block = blockIdx.x, c = cluster.num_blocks(), clusters = blocks / c;
  const unsigned group = block / c;  // the block's cluster
  unsigned long long phase = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const Stamp start = stamp();
    for (int i = 0; i < iters; ++i) {
      ++phase;
      if (threadIdx.x == 0) slots[block] = static_cast<unsigned>(phase);
      if (mode == 0) {
        const tsrnn::cuda::FlagBarrier flag{counters, blocks};
        flag.arrive();
        flag.wait(phase);
      } else if (mode == 1) {
        tsrnn::cuda::FlagBarrier{counters + 16 * group, c}.arrive();
        if (threadIdx.x < clusters) poll(counters + 16 * threadIdx.x, phase * c);
        __syncthreads();
      } else {  // the grid kernel's: a cluster barrier, the cluster's one arrival, every block polling
        const tsrnn::cuda::FlagBarrier flag{counters, clusters};
        cluster.sync();
        flag.arrive_for_cluster(cluster.block_rank());
        flag.wait(phase);
      }
      if (threadIdx.x == 0 && __ldcg(&slots[(block + 1) % blocks]) < phase) *wrong = 1;
    }
    if (block == 0 && threadIdx.x == 0) record(times, rep, start);
  }
}

// --- 4. __ldcg chain --------------------------------------------------------------------------------
__global__ void ldcg_chain_kernel(const unsigned* next, unsigned start_index, int iters, int reps, unsigned* end,
                                  Times* times) {
  unsigned i = start_index;
  for (int rep = 0; rep < reps; ++rep) {
    const Stamp start = stamp();
    for (int k = 0; k < iters; ++k) i = __ldcg(&next[i]);
    record(times, rep, start);
  }
  *end = i;
}

// --- 5. fragment loads ------------------------------------------------------------------------------
// A 16 x pitch bf16 tile in shared memory; element (r, c) holds the bits 2 (37 r + c) mod 2^15
// (even: the lowest bit of a lane's sum, added to the next column, changes nothing, but the compiler
// cannot know, so every element of every tile is loaded and each load waits for the previous one).
// The check: the sum of the bits of the last tile, over the warp's registers, equals the tile's.
__device__ std::uint32_t element_bits(int r, int c) { return (2u * static_cast<std::uint32_t>(37 * r + c)) & 0x7fffu; }

__device__ std::uint32_t warp_sum(std::uint32_t v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <bool Ldmatrix>
__global__ void fragment_loads_kernel(int pitch, int iters, int reps, Times* times, int* wrong) {
  auto* tile = dynamic_shared<std::uint16_t>();
  for (int e = threadIdx.x; e < 16 * pitch; e += blockDim.x) tile[e] = static_cast<std::uint16_t>(element_bits(e / pitch, e % pitch));
  __syncwarp();
  const int lane = threadIdx.x % 32, tiles = pitch / 16;
  int column = 0;
  std::uint32_t sum = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const Stamp start = stamp();
    for (int k = 0; k < iters; ++k) {
      column = (column + 1) % tiles;
      const std::uint16_t* base = tile + 16 * column;
      sum = 0;
      if constexpr (Ldmatrix) {
        std::uint32_t r[4];
        const int i = lane / 8, row = lane % 8;  // matrix i: rows 8 (i % 2).., columns 8 (i / 2)..
        ptx::ldmatrix<4>(r, base + (8 * (i % 2) + row) * pitch + 8 * (i / 2));
        for (int j = 0; j < 4; ++j) sum += (r[j] & 0xffffu) + (r[j] >> 16);
      } else {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::load_matrix_sync(a, reinterpret_cast<const __nv_bfloat16*>(base), pitch);
        for (int j = 0; j < a.num_elements; ++j) {
          std::uint16_t bits;
          std::memcpy(&bits, &a.x[j], sizeof bits);
          sum += bits;
        }
      }
      column += static_cast<int>(sum & 1u);  // 0 (even bits): the next tile's address depends on this one's data
    }
    if (lane == 0) record(times, rep, start);
  }
  sum = warp_sum(sum);
  if (lane == 0) {
    std::uint32_t expected = 0;
    for (int r = 0; r < 16; ++r) {
      for (int c = 0; c < 16; ++c) expected += element_bits(r, 16 * column + c);
    }
    if (sum != expected) *wrong = 1;
  }
}

__global__ void occupancy_kernel() {}

}  // namespace

cudaError_t cluster_barrier(int cluster, bool relaxed, int stores, int iters, int reps, float* scratch, Times* times, int* wrong) {
  const auto kernel = relaxed ? cluster_barrier_kernel<true> : cluster_barrier_kernel<false>;
  cudaError_t err = cluster > 8 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) : cudaSuccess;
  if (err == cudaSuccess) {
    err = launch_clusters(kernel, cluster, kThreads, cluster, 0, false, nullptr, stores, iters, reps, scratch, times,
                          wrong);
  }
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

cudaError_t dsmem_pingpong(int iters, int reps, Times* times, int* wrong) {
  const cudaError_t err = launch_clusters(dsmem_pingpong_kernel, 2, 32, 2, 16, false, nullptr, iters, reps, times, wrong);
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

cudaError_t flag_barrier(int mode, int blocks, int cluster, int iters, int reps, unsigned long long* counters, unsigned* slots,
                         Times* times, int* wrong) {
  const cudaError_t err = launch_clusters(flag_barrier_kernel, blocks, kThreads, mode == 0 ? 1 : cluster, 0, true, nullptr, mode,
                                          iters, reps, counters, slots, times, wrong);
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

cudaError_t ldcg_chain(const unsigned* next, unsigned start, int iters, int reps, unsigned* end, Times* times) {
  void* args[] = {&next, &start, &iters, &reps, &end, &times};
  const cudaError_t err = cudaLaunchKernel(ldcg_chain_kernel, dim3(1), dim3(1), args);
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

cudaError_t fragment_loads(bool ldmatrix, int pitch, int iters, int reps, Times* times, int* wrong) {
  void* args[] = {&pitch, &iters, &reps, &times, &wrong};
  const std::size_t bytes = 16 * pitch * sizeof(std::uint16_t);
  const cudaError_t err = ldmatrix ? cudaLaunchKernel(fragment_loads_kernel<true>, dim3(1), dim3(32), args, bytes)
                                   : cudaLaunchKernel(fragment_loads_kernel<false>, dim3(1), dim3(32), args, bytes);
  return err != cudaSuccess ? err : cudaDeviceSynchronize();
}

cudaError_t active_clusters(int cluster, int shared_bytes, int* clusters) {
  int device = 0, optin = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess) return err;
  return tsrnn::cuda::tensor_core::resident_clusters(occupancy_kernel, 256, optin, cluster, shared_bytes, clusters);
}

int multiprocessors() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms;
}

}  // namespace tsrnn_micro
