// The per-step flag barrier of the grid-resident kernel (csrc/recurrence/cuda/grid_recurrence.cu):
// the blocks of a launch that keeps all its blocks resident count their arrivals on one 64-bit
// counter in global memory, zeroed before the launch. With `parties` arrivals a phase, phase k
// (k = 1, 2, ...) is open once the counter reads at least k * parties.
//
//   arrive():              a block's arrival (parties: the launch's blocks): a block barrier (every
//                          thread of the block is done with what the phase publishes), then thread 0
//                          adds 1 with release semantics at device scope, so the block's writes
//                          before the barrier are visible to any thread that acquires the count;
//   arrive_for_cluster(r): a cluster's arrival (parties: the launch's clusters), called by every
//                          thread of the cluster right after a cluster barrier (release and acquire
//                          at cluster scope) that ordered every block's writes of the phase before
//                          it: thread 0 of block rank 0 alone adds 1 with release semantics at
//                          device scope. The writes it acquired at the cluster barrier are released
//                          with its own (PTX's causality order is transitive across scopes), and the
//                          counter sees one arrival a cluster instead of one a block;
//   wait(k):               thread 0 polls the counter with acquire loads at device scope, sleeping
//                          kPollNanoseconds between polls, until it reads k * parties; then a block
//                          barrier hands the acquired view to the block's other threads.
//
// The arrive is split from the wait so that a block can issue stores nobody reads in this phase
// (the saved activations) between the two. It is the same pattern as cooperative_groups' grid
// sync, without its fixed arrive-then-wait pairing. The counter never wraps: 2^64 arrivals.
// Under the SIMT emulation (tests/simt) every acquire load and atomic is a point where another
// CUDA thread may run, and a wait that can never open is reported with its block and phase.
#pragma once

#include <cuda/atomic>

namespace tsrnn {
namespace cuda {

struct FlagBarrier {
  unsigned long long* counter;  // zero at the launch
  unsigned long long parties;   // arrivals a phase: the launch's blocks (arrive) or clusters (arrive_for_cluster)

  static constexpr unsigned kPollNanoseconds = 32;

  __device__ void arrive() const {
    __syncthreads();
    if (threadIdx.x == 0) add();
  }

  __device__ void arrive_for_cluster(unsigned rank) const {
    if (rank == 0 && threadIdx.x == 0) add();
  }

  __device__ void wait(unsigned long long phase) const {
    if (threadIdx.x == 0) {
#ifdef TSRNN_SIMT
      simt::label("flag barrier phase", static_cast<long long>(phase));
#endif
      ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> count(*counter);
      while (count.load(::cuda::memory_order_acquire) < phase * parties) __nanosleep(kPollNanoseconds);
    }
    __syncthreads();
  }

 private:
  __device__ void add() const {
    ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> count(*counter);
    count.fetch_add(1ull, ::cuda::memory_order_release);
  }
};

}  // namespace cuda
}  // namespace tsrnn
