// The compiled cells, one line each: TSRNN_CELLS(X) calls X(type) for every cell type, in the order
// of tsrnn/ops/recurrence/cells/__init__.py's CELLS (tests/kernels/recurrence/test_cell_list.py
// checks the two lists against each other). It feeds csrc/recurrence/op.h's dispatch_cell and the
// kernels' explicit instantiations. Adding a cell: its header in this folder, its include and one
// X(...) line here (a type name without a comma: alias a template's instance first).
//
// A cell is a struct with
//   kName        its name, as the Python cell's
//   kGates       G: rows of W per unit (gate pre-activations z, stride zs between gates)
//   kStates      S: states carried besides h (stride BH between states)
//   kSaved       K: activations saved per unit for the backward (stride H, also dz's stride)
//   kParams      P: per-unit parameters (params [P, H]; the cell reads param[0..P), the backward
//                accumulates dL/dparam into dparam[0..P))
//   kStepInput   whether it reads a per-step, per-row input (steps; 1 where the call gives none)
//   kConstants   float constants (constant[0..kConstants))
// and static forward() (returns h_t) and backward() (writes dz, dstate and dparam), templates over
// the float type, __host__ __device__ under nvcc.
#pragma once

#include "recurrence/cells/janet.h"
#include "recurrence/cells/lstm.h"
#include "recurrence/cells/plstm.h"

#define TSRNN_CELLS(X) \
  X(LSTMCell)          \
  X(PlstmCoupled)      \
  X(PlstmSeparate)     \
  X(JanetCell)

namespace tsrnn {

constexpr int kMaxConstants = 4;  // the most constants a cell may declare (the CUDA kernels' Constants)

#define TSRNN_CHECK_CELL(C)                                                                     \
  static_assert(C::kConstants >= 0 && C::kConstants <= kMaxConstants,                          \
                "a cell declares at most kMaxConstants constants");                             \
  static_assert(C::kParams >= 0 && C::kGates >= 1 && C::kStates >= 1 && C::kSaved >= 0, "cell sizes");
TSRNN_CELLS(TSRNN_CHECK_CELL)
#undef TSRNN_CHECK_CELL

// The size of a local array of n values (n may be 0: arrays of size 0 are not C++).
TSRNN_HOST_DEVICE constexpr int at_least_one(int n) { return n > 0 ? n : 1; }

}  // namespace tsrnn
