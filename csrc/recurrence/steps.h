// The rows of one recurrence call (csrc/recurrence/op.h): Shapes (T steps, B rows, H units) and
// Steps, which rows each step runs, padded or packed (torch's PackedSequence layout). op.h's
// steps_of builds a Steps after checking batch_sizes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace tsrnn {

using at::Tensor;

// Shapes of one call, checked once: T steps, B rows, H units.
struct Shapes {
  int64_t T, B, H;
};

// The rows each step runs. Padded (no batch_sizes): every step runs all B rows, row t*B + b of
// xg, h_all, saved, dz. Packed (batch_sizes [T], torch's PackedSequence layout, the batch sorted
// by length): step t runs rows b < rows(t), row first(t) + b of the packed tensors [N, ...];
// state_all stays [T, S, B, H], its rows b >= rows(t) at step t zero (allocated so; no kernel
// writes them).
struct Steps {
  bool packed = false;
  std::vector<int64_t> offsets;  // [T + 1]: first(t) = offsets[t], offsets[T] = N
  Tensor offsets_cpu;            // the same, an int64 CPU tensor (the CUDA kernels copy it over)

  int64_t first(int64_t t) const { return offsets[t]; }
  int64_t rows(int64_t t) const { return offsets[t + 1] - offsets[t]; }
};

}  // namespace tsrnn
