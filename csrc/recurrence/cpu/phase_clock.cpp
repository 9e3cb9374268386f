// The totals of csrc/recurrence/cpu/phase_clock.h and torch.ops.tsrnn.cpu_loop_profile (schema in
// tsrnn/ops/projection.py): seconds per phase since the last read, summed over the loops and averaged over
// the threads that ran them (a thread-loop: one thread's part of one loop), in the order forward
// GEMM, forward cell, forward wait, backward cell, backward wait, backward GEMM; the read resets
// them.
#include "recurrence/cpu/phase_clock.h"

#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tsrnn {
namespace {

std::atomic<int64_t> totals[kPhases];
std::atomic<int64_t> thread_loops[2];  // forward, backward

bool is_forward(int phase) { return phase <= kForwardWait; }

std::vector<double> cpu_loop_profile() {
  const int64_t loops[2] = {thread_loops[0].exchange(0), thread_loops[1].exchange(0)};
  std::vector<double> seconds(kPhases);
  for (int p = 0; p < kPhases; ++p) {
    const int64_t ran = loops[is_forward(p) ? 0 : 1];
    seconds[p] = ran ? static_cast<double>(totals[p].exchange(0)) * 1e-9 / ran : 0.0;
  }
  return seconds;
}

}  // namespace

bool phase_clock_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("TSRNN_CPU_PROFILE");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return enabled;
}

void add_phase_times(const int64_t (&ns)[kPhases], bool forward) {
  for (int p = 0; p < kPhases; ++p) totals[p] += ns[p];
  thread_loops[forward ? 0 : 1] += 1;
}

TORCH_LIBRARY_IMPL(tsrnn, CompositeExplicitAutograd, m) { m.impl("cpu_loop_profile", &cpu_loop_profile); }

}  // namespace tsrnn
