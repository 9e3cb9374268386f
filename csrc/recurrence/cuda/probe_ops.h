// The operators of the GPU probe's builds (csrc/recurrence/cuda/probe.h): bench/probe/binding.cpp
// registers them as torch.ops.tsrnn_probe.*, the SIMT emulation's probe library (tests/simt) as
// torch.ops.simt.probe_*. Compiled with -DTSRNN_PROBE=1 only.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "check_message.h"
#include "recurrence/cuda/probe.h"

namespace tsrnn {
namespace cuda {
namespace probe {

// The next launches of the tensor-core kernels run the rung `skip` (0: all parts; else the bits of
// Part it leaves out, one of the kernel's rungs) and record their phase trace into `trace` (int64,
// contiguous, [blocks][kHeader + steps * kPhases], zeroed by the caller), or none. ignore_skip: the
// tests' planted bug, the rung ignored.
inline void arm(int64_t skip, const std::optional<at::Tensor>& trace, bool ignore_skip) {
  TSRNN_CHECK(skip >= 0 && skip < (int64_t{1} << kParts), "tsrnn probe: skip must be a mask of ", kParts,
              " parts, got ", skip);
  Armed& state = armed();
  state = Armed{};
  state.skip = static_cast<unsigned>(skip);
  state.ignore_skip = ignore_skip;
  if (!trace) return;
  const at::Tensor& t = *trace;
  constexpr int phases = Phase::kPhases;
  TSRNN_CHECK(t.scalar_type() == at::kLong && t.dim() == 2 && t.is_contiguous() &&
                  t.size(1) >= kHeader + Phase::kPhases && (t.size(1) - kHeader) % Phase::kPhases == 0,
              "tsrnn probe: the trace must be a contiguous int64 [blocks, ", kHeader, " + steps * ", phases,
              "], got ", t.sizes());
  state.trace = Trace{t.data_ptr<int64_t>(), static_cast<int>(t.size(0)),
                      static_cast<int>((t.size(1) - kHeader) / Phase::kPhases)};
}

// The phases' names (the trace's slots, in order) and the parts' (bit i of a rung: name i).
inline std::tuple<std::vector<std::string>, std::vector<std::string>, int64_t> layout() {
  return {std::vector<std::string>(kPhaseNames, kPhaseNames + Phase::kPhases),
          std::vector<std::string>(kPartNames, kPartNames + kParts), kHeader};
}

// The rungs a kernel ("cluster", "grid") is built with.
inline std::vector<int64_t> rungs(const std::string& kernel) {
  TSRNN_CHECK(kernel == "cluster" || kernel == "grid", "tsrnn probe: no kernel '", kernel, "'");
  if (kernel == "cluster") return {std::begin(kClusterRungs), std::end(kClusterRungs)};
  return {std::begin(kGridRungs), std::end(kGridRungs)};
}

}  // namespace probe
}  // namespace cuda
}  // namespace tsrnn
