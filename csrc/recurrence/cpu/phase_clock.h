// Opt-in timing of the CPU time loops' phases, for bench/cpu_profile.py: with TSRNN_CPU_PROFILE=1
// in the environment (read once), each thread of a loop times its phases (the per-step GEMM, the
// cell, the wait at the step's barrier) and adds them, at the end of the loop, to process-wide
// totals that torch.ops.tsrnn.cpu_loop_profile reads (averaged over the threads that ran each
// direction) and resets. Off, a lap is one branch.
#pragma once

#include <chrono>
#include <cstdint>

namespace tsrnn {

enum Phase { kForwardGemm, kForwardCell, kForwardWait, kBackwardCell, kBackwardWait, kBackwardGemm, kPhases };

// Whether TSRNN_CPU_PROFILE=1.
bool phase_clock_enabled();

// Adds one thread's nanoseconds per phase to the totals, and the thread to the count of its
// direction's thread-loops (the forward's phases, or the backward's).
void add_phase_times(const int64_t (&ns)[kPhases], bool forward);

// One thread's clock over one loop of one direction: lap(p) charges the time since the last lap
// (or construction) to phase p.
class PhaseClock {
 public:
  explicit PhaseClock(bool forward) : on_(phase_clock_enabled()), forward_(forward) {
    if (on_) last_ = Clock::now();
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  ~PhaseClock() {
    if (on_) add_phase_times(ns_, forward_);
  }

  void lap(Phase phase) {
    if (!on_) return;
    const Clock::time_point now = Clock::now();
    ns_[phase] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
    last_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool on_, forward_;
  Clock::time_point last_;
  int64_t ns_[kPhases] = {};
};

}  // namespace tsrnn
