// The GPU probe's hooks in the tensor-core kernels (cluster_recurrence.cu, grid_recurrence.cu; run by
// bench/gpu_probe.py): a phase trace and the removal ladder. They are compiled in only with
// -DTSRNN_PROBE=1, by the probe's own build (bench/probe/build.py) and the emulation's probe library
// (tests/simt/build.py), never by the installed extension: without it the Recorder is an empty
// struct whose calls compile to nothing, with_skip launches the kernels with no part skipped, and
// the kernels are the installed build's (tests/kernels/recurrence/test_cuda_sass.py checks that no
// clock read is left in them).
//
// Phase trace: thread 0 of each block adds the SM clock's cycles since its last mark to the phase it
// just ended, per step, and stores them into trace[block][kHeader + slot * kPhases + phase] (int64), slot t for step t forward and t + 1 backward (whose loop ends with t = -1),
// with the block's clock and global timer at its start and end in the header. A phase's cycles are
// thread 0's: a load issued in one phase is charged to the phase that first uses its value.
// Removal ladder: a kernel instantiated with a nonzero Skip leaves out the parts whose bits it holds
// (its results are wrong by design); only the LSTM in TF32 and bf16 has these variants.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

#if defined(__CUDACC__) || defined(TSRNN_SIMT)  // device code (a host-only binding sees the host side only)
#include "recurrence/cuda/ptx.h"
#endif

namespace tsrnn {
namespace cuda {
namespace probe {

// The parts a ladder rung leaves out (bits of Skip).
enum Part : unsigned {
  kMma = 1u << 0,          // the mma instructions (the operands are still loaded and consumed)
  kOperands = 1u << 1,     // the whole product: operand loads and mma
  kCellLoads = 1u << 2,    // the cell's global loads (xg; backward: saved activations, states, grad_h)
  kStores = 1u << 3,       // the cell's global stores (h, states, saved activations; backward dz)
  kExchange = 1u << 4,     // distributed shared memory: the cluster kernel's st.async pushes (h forward,
                           // partial products backward) and the handshake guarding them; grid partial sums
  kRelaxed = 1u << 5,      // grid kernel: every cluster arrival relaxed instead of release-flavoured
  kBarriers = 1u << 6,     // no synchronisation in the time loop: the grid kernel's cluster barriers,
                           // the cluster kernel's mbarrier protocol
  kGridLoads = 1u << 7,    // grid kernel: the load of h (dz) from L2
  kFlagBarrier = 1u << 8,  // grid kernel: the flag barrier
};
inline constexpr const char* kPartNames[] = {"mma",     "operands", "cell_loads", "stores",      "exchange",
                                             "relaxed", "barriers", "grid_loads", "flag_barrier"};
inline constexpr int kParts = sizeof(kPartNames) / sizeof(kPartNames[0]);

// The rungs each kernel is built with (0: nothing skipped, the baseline).
// (The cluster kernel's loops arrive at no cluster barrier: it has no kRelaxed rung.)
inline constexpr unsigned kClusterRungs[] = {0, kMma, kOperands, kCellLoads, kStores, kExchange, kBarriers};
inline constexpr unsigned kGridRungs[] = {0,        kMma,      kOperands,  kCellLoads,  kStores,
                                          kExchange, kRelaxed, kBarriers, kGridLoads, kFlagBarrier};

// The phases of a step (slots of the trace), in the order the kernels' steps run them.
struct Phase {
  enum : int {
    kWait,         // cluster: the wait for the exchange's data; grid: the flag barrier's wait
    kLoad,         // grid: the block's slice of h (dz) read from L2
    kProduct,      // operand loads and mma of thread 0's warp's tiles
    kBlockSync,    // the block barrier after the product (backward cluster: after the cell)
    kArrive,       // cluster: the arrivals that announce what the exchange expects and that a block is done reading
    kClusterSync,  // grid: the cluster syncs around a chunk's product
    kExchange,     // distributed shared memory: h_t pushed (cluster forward), partial products summed
    kCell,         // the cell over thread 0's pairs: global loads, math, global stores
    kWaitB,        // cluster: the wait until every block is done reading what this one pushes into
    kFlagArrive,   // grid: the flag barrier's arrival
    kStoresAfter,  // grid forward: the states and activations stored after the arrival
    kPhases
  };
};
inline constexpr const char* kPhaseNames[] = {"wait",     "load", "product",  "block_sync",  "arrive",       "cluster_sync",
                                              "exchange", "cell", "wait_b",   "flag_arrive",  "stores_after"};
static_assert(sizeof(kPhaseNames) / sizeof(kPhaseNames[0]) == Phase::kPhases, "a name per phase");
inline constexpr int kHeader = 4;  // clock at start, clock at end, global timer at start, at end

// Where a launch records its trace: `data` [blocks][kHeader + steps * kPhases], or none (a block or
// step past the buffer records nothing).
struct Trace {
  std::int64_t* data = nullptr;
  int blocks = 0, steps = 0;
};

// What the next launches do (set by the probe's operator arm, read by the launches): the rung and
// the trace buffer. A host variable of the probe build.
struct Armed {
  unsigned skip = 0;
  Trace trace;
  bool ignore_skip = false;  // the tests' planted bug: the rung is ignored (the baseline runs)
};
inline Armed& armed() {
  static Armed state;
  return state;
}

template <unsigned Skip>
struct Skips {
  __host__ __device__ static constexpr bool of(unsigned part) { return (Skip & part) != 0; }
};

#if defined(TSRNN_PROBE) && (defined(__CUDACC__) || defined(TSRNN_SIMT))
// Thread 0's clock marks of a block (see the top of this file): a step's cycles per phase add up in
// registers (a read-modify-write of the buffer at every mark would put a memory round trip into the
// phases) and are stored when the next step starts and at the end.
class Recorder {
 public:
  template <class Shape>
  __device__ explicit Recorder(const Shape& s)
      : row_(s.trace.data && threadIdx.x == 0 && static_cast<int>(blockIdx.x) < s.trace.blocks
                 ? s.trace.data + static_cast<long long>(blockIdx.x) * (kHeader + s.trace.steps * Phase::kPhases)
                 : nullptr),
        steps_(s.trace.steps) {
    if (row_) {
      row_[0] = static_cast<std::int64_t>(ptx::clock());
      row_[2] = static_cast<std::int64_t>(ptx::globaltimer());
    }
  }
  __device__ void step(int slot) {
    if (!row_) return;
    flush();
    slot_ = slot < steps_ ? row_ + kHeader + slot * Phase::kPhases : nullptr;
    last_ = ptx::clock();
  }
  __device__ void mark(int phase) {
    if (!slot_) return;
    const std::uint64_t now = ptx::clock();
    cycles_[phase] += static_cast<std::uint32_t>(now - last_);
    last_ = now;
  }
  __device__ void finish() {
    if (!row_) return;
    flush();
    row_[1] = static_cast<std::int64_t>(ptx::clock());
    row_[3] = static_cast<std::int64_t>(ptx::globaltimer());
  }

 private:
  __device__ void flush() {
    if (slot_) {
#pragma unroll
      for (int p = 0; p < Phase::kPhases; ++p) slot_[p] = cycles_[p];
    }
#pragma unroll
    for (int p = 0; p < Phase::kPhases; ++p) cycles_[p] = 0;
  }

  std::int64_t* row_;
  int steps_;
  std::int64_t* slot_ = nullptr;
  std::uint64_t last_ = 0;
  std::uint32_t cycles_[Phase::kPhases] = {};
};

#elif defined(__CUDACC__) || defined(TSRNN_SIMT)
struct Recorder {
  template <class Shape>
  __device__ explicit Recorder(const Shape&) {}
  __device__ void step(int) {}
  __device__ void mark(int) {}
  __device__ void finish() {}
};
#endif

#ifdef TSRNN_PROBE
// fn(std::integral_constant<unsigned, Rungs[I]>) for the first rung from I on that equals skip.
template <const auto& Rungs, std::size_t I, typename Fn>
cudaError_t dispatch_rung(unsigned skip, Fn& fn) {
  if constexpr (I == sizeof(Rungs) / sizeof(Rungs[0])) {
    return cudaErrorInvalidValue;
  } else {
    return skip == Rungs[I] ? fn(std::integral_constant<unsigned, Rungs[I]>{}) : dispatch_rung<Rungs, I + 1>(skip, fn);
  }
}

// fn(std::integral_constant<unsigned, rung>) for the armed rung: Rungs lists what is built; a rung
// not built (or any nonzero rung where Eligible is false) is refused with cudaErrorInvalidValue.
template <bool Eligible, const auto& Rungs, typename Fn>
cudaError_t with_skip(Fn&& fn) {
  const unsigned skip = armed().ignore_skip ? 0u : armed().skip;
  if constexpr (!Eligible) {
    return skip == 0 ? fn(std::integral_constant<unsigned, 0>{}) : cudaErrorInvalidValue;
  } else {
    return dispatch_rung<Rungs, 0>(skip, fn);
  }
}
#else
template <bool Eligible, const auto& Rungs, typename Fn>
cudaError_t with_skip(Fn&& fn) {
  return fn(std::integral_constant<unsigned, 0>{});
}
#endif

}  // namespace probe
}  // namespace cuda
}  // namespace tsrnn
