// Opt-in timing of the CPU time loops' phases, for bench/cpu_profile.py: with TSRNN_CPU_PROFILE=1
// in the environment (read once), each thread of a loop times its phases (the per-step GEMM, the
// cell, the wait at the step's barrier) and adds them, at the end of the loop, to process-wide
// totals that torch.ops.tsrnn.cpu_loop_profile reads and resets. Off, a lap is one branch.
#pragma once

#include <chrono>
#include <cstdint>

namespace tsrnn {

enum Phase { kForwardGemm, kForwardCell, kForwardWait, kBackwardCell, kBackwardWait, kBackwardGemm, kPhases };

// Whether TSRNN_CPU_PROFILE=1.
bool phase_clock_enabled();

// Adds one thread's nanoseconds per phase to the totals.
void add_phase_times(const int64_t (&ns)[kPhases]);

// One thread's clock over one loop: lap(p) charges the time since the last lap (or construction)
// to phase p.
class PhaseClock {
 public:
  PhaseClock() : on_(phase_clock_enabled()) {
    if (on_) last_ = Clock::now();
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  ~PhaseClock() {
    if (on_) add_phase_times(ns_);
  }

  void lap(Phase phase) {
    if (!on_) return;
    const Clock::time_point now = Clock::now();
    ns_[phase] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool on_;
  Clock::time_point last_;
  int64_t ns_[kPhases] = {};
};

}  // namespace tsrnn
