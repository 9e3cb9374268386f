// Small kernels that check the emulation's atomics and the grid-resident kernel's flag barrier
// (csrc/recurrence/cuda/flag_barrier.h; tests/kernels/recurrence/test_simt.py, through probes.cpp's
// simt_probe): blocks that publish a slot per phase and read every other block's after the
// barrier, launched cooperatively by cudaLaunchKernelEx (with and without a cluster dimension);
// that a block which skips its arrive is reported as a livelock naming the blocks and the phase
// they wait at; that a cooperative launch of more blocks than the device holds at once is
// refused; and what atomicAdd, atomicCAS, atomicExch and cuda::atomic_ref return. Built once per
// planted bug of tests/simt/build.py (`plant`): this file's flag barrier is the one it breaks.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <cuda/atomic>
#include <cuda_runtime.h>

#include "recurrence/cuda/flag_barrier.h"

namespace {

constexpr int kBlocks = 8, kThreads = 64, kPhases = 6;

float slot_value(int phase, int block, int thread) { return static_cast<float>(phase * 10000 + block * 100 + thread); }

// The first stale read: its phase (0: none), the reading block and thread, the block it read, the value.
struct Wrong {
  int phase, reader, thread, writer;
  float value;
};

// Each phase k = 1..phases: every thread writes its slot of phase k, its block arrives (unless it
// is block `skip_block` in phase `skip_phase`: a planted missing arrive), waits for phase k, and
// reads its slot in every other block.
__global__ void flag_exchange(float* slots, unsigned long long* counter, Wrong* wrong, int phases, int skip_block,
                              int skip_phase) {
  const tsrnn::cuda::FlagBarrier barrier{counter, gridDim.x};
  const int blocks = static_cast<int>(gridDim.x), block = static_cast<int>(blockIdx.x);
  const int thread = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  for (int k = 1; k <= phases; ++k) {
    float* phase = slots + static_cast<std::size_t>(k - 1) * blocks * threads;
    phase[block * threads + thread] = slot_value(k, block, thread);
    if (block == skip_block && k == skip_phase) {
      __syncthreads();
    } else {
      barrier.arrive();
    }
    barrier.wait(static_cast<unsigned long long>(k));
    for (int b = 0; b < blocks; ++b) {
      const float v = phase[b * threads + thread];
      if (b != block && v != slot_value(k, b, thread) && wrong->phase == 0) *wrong = Wrong{k, block, thread, b, v};
    }
  }
}

std::string error_of(cudaError_t err) { return err == cudaSuccess ? "" : cudaGetErrorString(err); }

cudaError_t launch_ex(void (*kernel)(float*, unsigned long long*, Wrong*, int, int, int), unsigned grid,
                      unsigned threads, std::size_t shared, unsigned cluster, bool cooperative, float* slots,
                      unsigned long long* counter, Wrong* wrong, int phases, int skip_block, int skip_phase) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared;
  cudaLaunchAttribute attribute[2];
  unsigned count = 0;
  if (cooperative) {
    attribute[count].id = cudaLaunchAttributeCooperative;
    attribute[count++].val.cooperative = 1;
  }
  if (cluster > 1) {
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = cluster;
    attribute[count].val.clusterDim.y = attribute[count].val.clusterDim.z = 1;
    ++count;
  }
  config.attrs = attribute;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, slots, counter, wrong, phases, skip_block, skip_phase);
}

// One cooperative launch of the exchange (clusters of `cluster` blocks) on NaN-filled slots and a
// zeroed counter: "ok", the first stale read, a wrong final count, or the launch's error.
std::string exchange(unsigned cluster, int skip_block = -1, int skip_phase = 0) {
  std::vector<float> slots(static_cast<std::size_t>(kPhases) * kBlocks * kThreads, std::numeric_limits<float>::quiet_NaN());
  unsigned long long counter = 0;
  Wrong wrong{};
  const std::string err = error_of(launch_ex(flag_exchange, kBlocks, kThreads, 0, cluster, true, slots.data(), &counter,
                                             &wrong, kPhases, skip_block, skip_phase));
  if (!err.empty()) return err;
  if (wrong.phase != 0) {
    return "stale read: block " + std::to_string(wrong.reader) + " thread " + std::to_string(wrong.thread) +
           " read " + std::to_string(wrong.value) + " in block " + std::to_string(wrong.writer) + "'s slot of phase " +
           std::to_string(wrong.phase) + " after the barrier";
  }
  if (counter != 1ull * kPhases * kBlocks) return "wrong: the counter ends at " + std::to_string(counter);
  return "ok";
}

// Both launches (a plain cooperative one, and one in clusters of 2), several times each (every
// launch draws its own thread order).
std::string flag_barrier() {
  for (int attempt = 0; attempt < 3; ++attempt) {
    for (unsigned cluster : {1u, 2u}) {
      const std::string got = exchange(cluster);
      if (got != "ok") return got;
    }
  }
  return "ok";
}

__global__ void noop(float*, unsigned long long*, Wrong*, int, int, int) {}

// With 100 KB of shared memory a block, 2 blocks fit a multiprocessor: a cooperative launch of
// one block more than the device holds is refused, with or without clusters; a launch of as many
// runs; and one that is not cooperative runs whatever its size.
std::string cooperative_limits() {
  int device = 0, sms = 0, per_sm = 0;
  const std::size_t shared = 100 * 1024;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaFuncSetAttribute(noop, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, noop, 32, shared);
  const unsigned fit = static_cast<unsigned>(per_sm * sms);
  const auto run = [&](unsigned grid, unsigned cluster, bool cooperative) {
    return launch_ex(noop, grid, 32, shared, cluster, cooperative, nullptr, nullptr, nullptr, 0, -1, 0);
  };
  const struct {
    const char* what;
    long long got, expected;
  } checks[] = {
      {"blocks per multiprocessor", per_sm, 2},
      {"cooperative, as many blocks as fit", run(fit, 1, true), cudaSuccess},
      {"cooperative, one block more", run(fit + 1, 1, true), cudaErrorCooperativeLaunchTooLarge},
      {"cooperative clusters of 2, as many blocks as fit", run(fit, 2, true), cudaSuccess},
      {"cooperative clusters of 2, one cluster more", run(fit + 2, 2, true), cudaErrorCooperativeLaunchTooLarge},
      {"not cooperative, one cluster more", run(fit + 2, 2, false), cudaSuccess},
  };
  for (const auto& c : checks) {
    if (c.got != c.expected) {
      return std::string("wrong: ") + c.what + " gave " + std::to_string(c.got) + ", expected " + std::to_string(c.expected);
    }
  }
  return "ok";
}

// Every thread of 4 blocks adds to counters (atomicAdd on int, unsigned, unsigned long long,
// float; cuda::atomic_ref's fetch_add), takes a ticket with a compare-and-swap loop, and swaps
// itself into a slot with atomicExch; the host checks the totals and that the tickets are distinct.
struct Counters {
  int i;
  unsigned u;
  unsigned long long ull, ref, next_ticket;
  float f;
  unsigned exch;
};

__global__ void atomics(Counters* c, unsigned* tickets, int, int, int, int) {
  const unsigned me = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&c->i, 1);
  atomicAdd(&c->u, 2u);
  atomicAdd(&c->ull, 3ull);
  atomicAdd(&c->f, 0.5f);
  ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(c->ref).fetch_add(me, ::cuda::memory_order_relaxed);
  unsigned long long seen = ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(c->next_ticket).load();
  for (;;) {
    const unsigned long long was = atomicCAS(&c->next_ticket, seen, seen + 1);
    if (was == seen) break;
    seen = was;
  }
  tickets[me] = static_cast<unsigned>(seen);
  atomicExch(&c->exch, me);
  __threadfence();
}

std::string atomics_probe() {
  constexpr unsigned kGrid = 4, kBlock = 64, kAll = kGrid * kBlock;
  Counters c{};
  c.exch = 0xffffffffu;
  std::vector<unsigned> tickets(kAll, 0xffffffffu);
  Counters* pc = &c;
  unsigned* pt = tickets.data();
  int zero = 0;
  void* args[] = {&pc, &pt, &zero, &zero, &zero, &zero};
  const std::string err = error_of(cudaLaunchKernel(atomics, kGrid, kBlock, args));
  if (!err.empty()) return err;
  std::vector<bool> seen(kAll, false);
  for (unsigned t : tickets) {
    if (t >= kAll || seen[t]) return "wrong: ticket " + std::to_string(t) + " handed out twice or out of range";
    seen[t] = true;
  }
  if (c.i != static_cast<int>(kAll) || c.u != 2 * kAll || c.ull != 3ull * kAll || c.f != 0.5f * kAll ||
      c.ref != 1ull * kAll * (kAll - 1) / 2 || c.next_ticket != kAll || c.exch >= kAll) {
    return "wrong: the counters end at " + std::to_string(c.i) + ", " + std::to_string(c.u) + ", " + std::to_string(c.ull) +
           ", " + std::to_string(c.f) + ", " + std::to_string(c.ref) + ", " + std::to_string(c.next_ticket) + ", " +
           std::to_string(c.exch);
  }
  return "ok";
}

// Planted: a spin lock whose holder exits without releasing it (a livelock with no label).
__global__ void lost_unlock(unsigned* lock, int, int, int) {
  if (threadIdx.x != 0) return;
  while (atomicCAS(lock, 0u, 1u) != 0u) __nanosleep(32);
}

}  // namespace

std::string simt_flag_probe(const std::string& name) {
  if (name == "flag_barrier") return flag_barrier();
  if (name == "flag_barrier_missing_arrive") return exchange(1, 2, 3);  // block 2 skips its arrive of phase 3
  if (name == "flag_barrier_cooperative_limits") return cooperative_limits();
  if (name == "atomics") return atomics_probe();
  if (name == "atomic_lost_unlock") {
    unsigned lock = 0;
    unsigned* pointer = &lock;
    int zero = 0;
    void* args[] = {&pointer, &zero, &zero, &zero};
    return error_of(cudaLaunchKernel(lost_unlock, 2, 32, args));
  }
  return "no probe " + name;
}
