// The totals of csrc/cpu/phase_clock.h and torch.ops.tsrnn.cpu_loop_profile (schema in
// tsrnn/ops.py): seconds per phase, summed over threads and loops since the last read, in the
// order forward GEMM, forward cell, forward wait, backward cell, backward wait, backward GEMM;
// the read resets them.
#include "cpu/phase_clock.h"

#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tsrnn {
namespace {

std::atomic<int64_t> totals[kPhases];

std::vector<double> cpu_loop_profile() {
  std::vector<double> seconds(kPhases);
  for (int p = 0; p < kPhases; ++p) seconds[p] = static_cast<double>(totals[p].exchange(0)) * 1e-9;
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

void add_phase_times(const int64_t (&ns)[kPhases]) {
  for (int p = 0; p < kPhases; ++p) totals[p] += ns[p];
}

TORCH_LIBRARY_IMPL(tsrnn, CompositeExplicitAutograd, m) { m.impl("cpu_loop_profile", &cpu_loop_profile); }

}  // namespace tsrnn
