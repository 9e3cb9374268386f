// The PTX the tensor-core kernels and the GPU probe use beyond CUDA's C++ API, one small function
// each, so that the SIMT emulation of the tests (tests/simt, which defines TSRNN_SIMT) can run the
// same source: there each function is the emulator's (the clocks a process-wide counter that only
// has to increase; the relaxed arrive a cluster arrival counted apart from the release-flavoured
// one). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace ptx
}  // namespace cuda
}  // namespace tsrnn
