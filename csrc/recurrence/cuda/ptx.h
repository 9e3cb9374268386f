// The PTX the tensor-core kernels and the GPU probe use beyond CUDA's C++ API, one small function
// each, so that the SIMT emulation of the tests (tests/simt, which defines TSRNN_SIMT) can run the
// same source: there each function is the emulator's (the clocks a process-wide counter that only
// has to increase; the relaxed arrive a cluster arrival counted apart from the release-flavoured
// one; shared-memory addresses, mapa, mbarriers, st.async and ldmatrix: tests/simt/ptx_emulation.h,
// from the PTX ISA's definitions, with its checks). Device code only; the mbarrier, st.async and
// mapa wrappers need sm_90, ldmatrix sm_75.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef TSRNN_SIMT
#include "ptx_emulation.h"
#endif

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

// cvta.to.shared: the 32-bit shared::cta address of a pointer into the block's shared memory.
__device__ inline std::uint32_t shared_address(const void* p, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  return simt::ptx::shared_address(p, line);
#else
  (void)line;
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
#endif
}

// mapa.shared::cluster.u32: the shared::cluster address of the same offset in block `rank` of the
// cluster (the destination of st.async).
__device__ inline std::uint32_t mapa(std::uint32_t address, unsigned rank, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  return simt::ptx::mapa(address, rank, line);
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
#else
  (void)line;
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(address), "r"(value), "r"(bar)
               : "memory");
#endif
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (a warp collective): lane 8 i + r passes the address of
// row r of 8x8 matrix i (16 bytes, 16-byte aligned); lane l gets in out[i] the two elements of row
// l / 4, columns 2 (l % 4) and 2 (l % 4) + 1, of matrix i.
__device__ inline void ldmatrix_x4(std::uint32_t (&out)[4], const void* row, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::ldmatrix_x4(out, row, line);
#else
  (void)line;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
               : "r"(shared_address(row))
               : "memory");
#endif
}

}  // namespace ptx
}  // namespace cuda
}  // namespace tsrnn
