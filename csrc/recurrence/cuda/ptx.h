// The PTX the tensor-core kernels and the GPU probe use beyond CUDA's C++ API, one small function
// each; nothing else in the kernels writes `asm`. The SIMT emulation of the tests (tests/simt, which
// defines TSRNN_SIMT) runs the same source: there each function is the emulator's
// (tests/simt/ptx_emulation.h, written from the PTX ISA's definitions and fragment layouts, with
// its checks; the clocks a process-wide counter that only has to increase). Device code only.
// Architectures: ldmatrix sm_75; mma.sync (TF32, bf16) and cp.async sm_80; mapa, the cluster
// barrier's split forms, st.async, cp.async.bulk, expect_tx and try_wait.parity sm_90 (built for an
// earlier GPU they trap: the plans launch no kernel that uses them there); cvt.rna.tf32 sm_80.
// The warp tiles' wrappers (cvta.to.shared, ldmatrix, cvt.rna.tf32, mma.sync, cp.async) are in
// ptx_tile.h, included here; this file holds the clocks and the cluster's (the cluster barrier, the
// restricted fences, mapa, mbarrier, st.async, cp.async.bulk).
//
// What each compiles to on sm_90 (nvcc 13.0, read from cuobjdump -sass; the GPU-wide fences are
// what a step of the time loop must not pay): mbarrier.arrive of shared::cta, release or relaxed:
// SYNCS.ARRIVE only; a remote arrive (shared::cluster) with .release: MEMBAR.ALL.GPU first, with
// .relaxed: none; barrier.cluster.arrive (release): MEMBAR.ALL.GPU, .relaxed: none;
// barrier.cluster.wait (acquire) and fence.acq_rel.cluster: CCTL.IVALL (the fence MEMBAR.ALL.GPU
// too); fence.release.sync_restrict::shared::cta.cluster: MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S;
// fence.acquire.sync_restrict::shared::cluster.cluster: none of its own; st.async: STAS; cp.async.bulk shared::cluster: UBLKCP; fence.proxy.async.shared::cta:
// MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S; mbarrier.try_wait.parity (acquire, CTA scope): SYNCS.PHASECHK.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef TSRNN_SIMT
#include "ptx_emulation.h"
#endif

#include "recurrence/cuda/ptx_tile.h"

namespace tsrnn {
namespace cuda {
namespace ptx {

// The SM's cycle counter (clock64): per SM, not comparable across SMs.
__device__ inline std::uint64_t clock() {
#ifdef TSRNN_SIMT
  return simt::clock_tick();
#else
  return static_cast<std::uint64_t>(clock64());
#endif
}

// The global nanosecond timer (%globaltimer): the same on every SM, updated about every 32 ns to
// 1 us depending on the GPU.
__device__ inline std::uint64_t globaltimer() {
#ifdef TSRNN_SIMT
  return simt::clock_tick();
#else
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

// barrier.cluster.arrive.relaxed.aligned: an arrival at the cluster barrier that orders no memory
// (the default arrive is a release, which sm_90 compiles to MEMBAR.ALL.GPU). Before sm_90 (a cluster
// of one, whose barrier is a block barrier: tensor_core.h) there is nothing to arrive at.
__device__ inline void cluster_arrive_relaxed(int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::cluster_arrive(line, true);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  (void)line;
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#else
  (void)line;
#endif
}

// Whether the fences restricted to shared memory below exist: PTX ISA 8.6, nvcc 12.8 or newer (and
// the SIMT emulation); with an older nvcc the grid kernel's exchange keeps its release barrier.
#if defined(TSRNN_SIMT) || \
    (defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 8)))
#define TSRNN_RESTRICTED_FENCES 1
inline constexpr bool kRestrictedFences = true;
#else
inline constexpr bool kRestrictedFences = false;
#endif

// fence.release.sync_restrict::shared::cta.cluster: this thread's earlier accesses to its own
// block's shared memory are ordered, at cluster scope, before its later (relaxed) arrival: the
// release half of a cluster barrier that publishes shared memory only (sm_90: MEMBAR.ALL.CTA, where
// a release arrive is MEMBAR.ALL.GPU). fence.acquire.sync_restrict::shared::cluster.cluster: its
// later reads of the cluster's shared memory are ordered after its wait. PTX ISA 8.6; before sm_90
// a cluster is one block, whose barrier is a block barrier: nothing to fence. The SIMT emulation
// counts each (not on the line its planted-bug tests drop, tests/simt/simt.h's set_drop).
__device__ inline void fence_release_own_shared(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
#ifdef TSRNN_SIMT
  simt::ptx::fence_shared(true, line, file);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(TSRNN_RESTRICTED_FENCES)
  (void)line, (void)file;
  asm volatile("fence.release.sync_restrict::shared::cta.cluster;" ::: "memory");
#else
  (void)line, (void)file;
#endif
}

__device__ inline void fence_acquire_cluster_shared(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
#ifdef TSRNN_SIMT
  simt::ptx::fence_shared(false, line, file);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(TSRNN_RESTRICTED_FENCES)
  (void)line, (void)file;
  asm volatile("fence.acquire.sync_restrict::shared::cluster.cluster;" ::: "memory");
#else
  (void)line, (void)file;
#endif
}

// mapa.shared::cluster.u32: the shared::cluster address of the same offset in block `rank` of the
// cluster (the destination of st.async).
__device__ inline std::uint32_t mapa(std::uint32_t address, unsigned rank, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  return simt::ptx::mapa(address, rank, line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  (void)line;
  __trap();
  return 0;
#else
  (void)line;
  std::uint32_t peer;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer) : "r"(address), "r"(rank));
  return peer;
#endif
}

// mbarrier.init.shared::cta.b64: `count` arrivals complete a phase (8 bytes of shared memory,
// 8-byte aligned); fence_mbarrier_init makes the init visible to the cluster's st.async.
__device__ inline void mbarrier_init(std::uint64_t* bar, unsigned count, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::mbarrier_init(bar, count, line);
#else
  (void)line;
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
#endif
}

__device__ inline void fence_mbarrier_init(int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::memory_point(line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  (void)line;
  __trap();
#else
  (void)line;
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// mbarrier.arrive.expect_tx.shared::cta.b64: the phase also waits for `bytes` of transactions
// (st.async's complete_tx), then this thread arrives.
__device__ inline void mbarrier_arrive_expect_tx(std::uint64_t* bar, unsigned bytes, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::mbarrier_arrive_expect_tx(bar, bytes, line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  (void)line;
  __trap();
#else
  (void)line;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes) : "memory");
#endif
}

// mbarrier.try_wait.parity.shared::cta.b64 (acquire, CTA scope): whether the phase of parity
// `parity` has completed (a bounded wait in hardware; false means poll again).
__device__ inline bool mbarrier_try_wait_parity(std::uint64_t* bar, unsigned parity, int line = __builtin_LINE(),
                                                const char* file = __builtin_FILE()) {
#ifdef TSRNN_SIMT
  return simt::ptx::mbarrier_try_wait_parity(bar, parity, file, line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  (void)line;
  (void)file;
  __trap();
  return false;
#else
  (void)line;
  (void)file;
  std::uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
#endif
}

// st.async.shared::cluster.mbarrier::complete_tx::bytes.b32: 4 bytes into a peer's shared memory
// (`address` from mapa), completing 4 bytes of transactions on the peer's mbarrier `bar` (mapa too).
__device__ inline void st_async(std::uint32_t address, std::uint32_t value, std::uint32_t bar, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::st_async(address, value, bar, line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  (void)line;
  __trap();
#else
  (void)line;
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(address), "r"(value), "r"(bar)
               : "memory");
#endif
}

// mbarrier.arrive.shared::cta.b64 (release at CTA scope: no GPU-wide fence): one arrival of this
// thread at its block's mbarrier `bar`.
__device__ inline void mbarrier_arrive(std::uint64_t* bar, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::mbarrier_arrive(bar, line);
#else
  (void)line;
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
#endif
}

// mbarrier.arrive.relaxed.cluster.shared::cluster.b64: one arrival at the mbarrier of a block of the
// cluster (`bar` from mapa), ordering no memory (the .release form costs MEMBAR.ALL.GPU). What it
// may signal is that this thread is done *reading* (the reads have returned their values), never
// that data it wrote is visible.
__device__ inline void mbarrier_arrive_remote_relaxed(std::uint32_t bar, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::mbarrier_arrive_remote(bar, line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  (void)line;
  __trap();
#else
  (void)line;
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}

// Polls mbarrier_try_wait_parity until the phase of parity `parity` of `bar` has completed.
__device__ inline void mbarrier_wait(std::uint64_t* bar, unsigned parity, int line = __builtin_LINE(),
                                     const char* file = __builtin_FILE()) {
  while (!mbarrier_try_wait_parity(bar, parity, line, file)) {
  }
}

// cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes: `bytes` (a multiple of 16;
// both addresses 16-byte aligned) of this block's shared memory at `from` into a block of the
// cluster at `to` (from mapa), completing `bytes` of transactions on that block's mbarrier `bar`
// (mapa too). The copy reads `from` through the async proxy: this thread's ordinary stores to it
// must be followed by fence_proxy_async_shared first.
__device__ inline void bulk_push(std::uint32_t to, const void* from, unsigned bytes, std::uint32_t bar, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::bulk_push(to, from, bytes, bar, line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  (void)line;
  __trap();
#else
  (void)line;
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(to),
               "r"(shared_address(from)), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// fence.proxy.async.shared::cta: this thread's ordinary shared-memory accesses are ordered before
// its later async-proxy ones (cp.async.bulk reading what it stored).
__device__ inline void fence_proxy_async_shared(int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::memory_point(line);
#else
  (void)line;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// barrier.cluster.arrive.release.aligned and barrier.cluster.wait.acquire.aligned: the cluster
// barrier's two halves in their ordering forms (a GPU-wide fence and an L1 invalidate: outside the
// time loop only).
__device__ inline void cluster_arrive_release(int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::cluster_arrive(line, false);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  (void)line;
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
  (void)line;  // a cluster of one (tensor_core.h): nothing to arrive at, its wait is a block barrier
#endif
}

__device__ inline void cluster_wait(int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::cluster_wait(line);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  (void)line;
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  (void)line;
  __syncthreads();
#endif
}

}  // namespace ptx
}  // namespace cuda
}  // namespace tsrnn
