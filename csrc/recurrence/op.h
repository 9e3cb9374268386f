// The recurrence operator's entries, recurrence_forward and recurrence_backward (schemas in
// tsrnn/ops/recurrence/op.py), one template each over a backend policy: CpuRecurrence (csrc/recurrence/cpu/recurrence.cpp)
// runs the OpenMP time loop, TensorCoreRecurrence (csrc/recurrence/cuda/tensor_core_policy.h) the
// launches of a tensor-core kernel. Here is what they share: contiguity, the cell dispatch, the argument checks (one error
// message per wrong shape, dtype or device; tsrnn/ops/recurrence/op.py checks the same for the fake and the
// Triton kernels), the outputs' allocation, the final states, the recurrent weight gradient and
// the parameters' gradient (a call's rows: recurrence/steps.h; the final states and dW_hh:
// recurrence/weight_grad.h).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "recurrence/cells/list.h"
#include "recurrence/products.h"
#include "recurrence/steps.h"
#include "recurrence/weight_grad.h"
#include "check_message.h"

namespace tsrnn {

using at::Tensor;

// Calls fn with a value of the cell type (csrc/recurrence/cells/list.h) named by `cell`.
template <typename Fn>
void dispatch_cell(const std::string& cell, Fn&& fn) {
  bool found = false;
  std::string known;  // 'lstm', 'plstm_coupled', ...
#define TSRNN_DISPATCH_CELL(C)                       \
  if (!found && cell == C::kName) {                  \
    found = true;                                    \
    fn(C{});                                         \
  }                                                  \
  known += known.empty() ? "'" : ", '";              \
  known += C::kName;                                 \
  known += "'";
  TSRNN_CELLS(TSRNN_DISPATCH_CELL)
#undef TSRNN_DISPATCH_CELL
  TSRNN_CHECK(found, "tsrnn: unknown cell '", cell, "', expected one of ", known);
}

// t has `dim` dimensions and the device and dtype of `like`.
inline void check_tensor(const Tensor& t, const char* name, int64_t dim, const Tensor& like) {
  TSRNN_CHECK(t.dim() == dim, "tsrnn: ", name, " must have ", dim, " dimensions, got ", t.sizes());
  TSRNN_CHECK(t.device() == like.device(), "tsrnn: ", name, " is on ", t.device(), ", expected ",
              like.device());
  TSRNN_CHECK(t.scalar_type() == like.scalar_type(), "tsrnn: ", name, " has dtype ",
              t.scalar_type(), ", expected ", like.scalar_type());
}

// The Products of a call's `precision` ("ieee", "tf32", "bf16"; csrc/recurrence/products.h).
inline Products products_of(const std::string& name) {
  if (name == "ieee") return Products::kIeee;
  if (name == "tf32") return Products::kTf32;
  if (name == "bf16") return Products::kBf16;
  TSRNN_CHECK(false, "tsrnn: unknown precision '", name, "', expected 'ieee', 'tf32' or 'bf16'");
}

// The Steps of a call of B rows and T steps whose packed tensors have n rows (n = T*B when
// padded), after checking batch_sizes' values: each in [1, B], non-increasing, summing to n
// (tsrnn/ops/recurrence/checks.py's packed_offsets, with the same messages).
inline Steps steps_of(const c10::optional<Tensor>& batch_sizes, const Shapes& s, int64_t n) {
  Steps steps;
  steps.packed = batch_sizes.has_value();
  steps.offsets.resize(s.T + 1);
  for (int64_t t = 0; t <= s.T; ++t) steps.offsets[t] = t * s.B;
  if (!steps.packed) return steps;
  const Tensor sizes = batch_sizes->contiguous();
  const int64_t* size = sizes.data_ptr<int64_t>();
  for (int64_t t = 0; t < s.T; ++t) {
    TSRNN_CHECK(size[t] >= 1 && size[t] <= s.B, "tsrnn: batch_sizes must be in [1, B=", s.B, "], got ",
                size[t]);
    TSRNN_CHECK(t == 0 || size[t] <= size[t - 1],
                "tsrnn: batch_sizes must be non-increasing (the batch sorted by length, longest first)");
    steps.offsets[t + 1] = steps.offsets[t] + size[t];
  }
  TSRNN_CHECK(steps.offsets[s.T] == n, "tsrnn: the packed tensors have ", n, " rows, batch_sizes sums to ",
              steps.offsets[s.T]);
  steps.offsets_cpu = at::tensor(steps.offsets, at::kLong);
  return steps;
}

// batch_sizes [T] int64 on the CPU; returns T.
inline int64_t check_batch_sizes(const Tensor& batch_sizes) {
  TSRNN_CHECK(batch_sizes.dim() == 1 && batch_sizes.size(0) >= 1,
              "tsrnn: batch_sizes must be [T] with T >= 1, got ", batch_sizes.sizes());
  TSRNN_CHECK(batch_sizes.scalar_type() == at::kLong, "tsrnn: batch_sizes must be int64, got ",
              batch_sizes.scalar_type());
  TSRNN_CHECK(batch_sizes.device().is_cpu(), "tsrnn: batch_sizes must be on the CPU, got ",
              batch_sizes.device());
  return batch_sizes.size(0);
}

// t is [T, B, width] (padded) or [N, width] (packed), its rank checked by the caller.
inline void check_rows(const Tensor& t, const char* name, const Shapes& s, int64_t width, bool packed) {
  if (packed) {
    TSRNN_CHECK(t.size(1) == width, "tsrnn: ", name, " must be [N, ", width, "] (packed), got ", t.sizes());
  } else {
    TSRNN_CHECK(t.size(0) == s.T && t.size(1) == s.B && t.size(2) == width, "tsrnn: ", name,
                " must be [T, B, ", width, "], got ", t.sizes());
  }
}

// What both directions take besides their own tensors, against s and the device and dtype of
// `like`: w_hh (its rank checked by the caller) [G*H, H], h0 [B, H], state0 [S, B, H], params
// [P, H] (exactly for a cell of P > 0 parameters), steps [T, B] or packed [N] (a cell with a step
// input, optional), the cell's number of constants (tsrnn/ops/recurrence/checks.py's _layer).
template <typename Cell>
void check_layer(const Shapes& s, const Tensor& like, const Tensor& w_hh, const Tensor& h0,
                 const Tensor& state0, const c10::optional<Tensor>& params,
                 const c10::optional<Tensor>& steps, c10::ArrayRef<double> constants, bool packed) {
  TSRNN_CHECK(w_hh.size(0) == Cell::kGates * s.H && w_hh.size(1) == s.H, "tsrnn: w_hh must be [",
              Cell::kGates * s.H, ", ", s.H, "], got ", w_hh.sizes());
  check_tensor(h0, "h0", 2, like);
  TSRNN_CHECK(h0.size(0) == s.B && h0.size(1) == s.H, "tsrnn: h0 must be [", s.B, ", ", s.H,
              "], got ", h0.sizes());
  check_tensor(state0, "state0", 3, like);
  TSRNN_CHECK(state0.size(0) == Cell::kStates && state0.size(1) == s.B && state0.size(2) == s.H,
              "tsrnn: state0 must be [", Cell::kStates, ", ", s.B, ", ", s.H, "], got ",
              state0.sizes());
  TSRNN_CHECK(params.has_value() == (Cell::kParams > 0), "tsrnn: params are ",
              Cell::kParams > 0 ? "required" : "not used", " for the cell ", Cell::kName);
  if (params) {
    check_tensor(*params, "params", 2, like);
    TSRNN_CHECK(params->size(0) == Cell::kParams && params->size(1) == s.H, "tsrnn: params must be [",
                Cell::kParams, ", ", s.H, "], got ", params->sizes());
  }
  if (steps) {
    TSRNN_CHECK(Cell::kStepInput, "tsrnn: the cell ", Cell::kName, " takes no step input (steps)");
    if (packed) {
      check_tensor(*steps, "steps", 1, like);
      TSRNN_CHECK(steps->size(0) == like.size(0), "tsrnn: steps must be [N], got ", steps->sizes());
    } else {
      check_tensor(*steps, "steps", 2, like);
      TSRNN_CHECK(steps->size(0) == s.T && steps->size(1) == s.B, "tsrnn: steps must be [", s.T, ", ", s.B,
                  "], got ", steps->sizes());
    }
  }
  TSRNN_CHECK(static_cast<int64_t>(constants.size()) == Cell::kConstants, "tsrnn: the cell ", Cell::kName,
              " takes ", Cell::kConstants, " constants, got ", constants.size());
}

// The forward's arguments against each other and the cell; returns T, B, H.
template <typename Cell>
Shapes check_inputs(const Tensor& xg, const Tensor& w_hh, const Tensor& h0, const Tensor& state0,
                    const c10::optional<Tensor>& params, const c10::optional<Tensor>& steps,
                    c10::ArrayRef<double> constants, const c10::optional<Tensor>& batch_sizes) {
  const bool packed = batch_sizes.has_value();
  check_tensor(xg, "xg", packed ? 2 : 3, xg);
  check_tensor(w_hh, "w_hh", 2, xg);
  if (packed) check_tensor(h0, "h0", 2, xg);
  const Shapes s = packed ? Shapes{check_batch_sizes(*batch_sizes), h0.size(0), w_hh.size(1)}
                          : Shapes{xg.size(0), xg.size(1), w_hh.size(1)};
  TSRNN_CHECK(s.T >= 1 && s.B >= 1 && s.H >= 1, "tsrnn: empty input, xg ", xg.sizes());
  check_layer<Cell>(s, xg, w_hh, h0, state0, params, steps, constants, packed);
  check_rows(xg, "xg", s, Cell::kGates * s.H, packed);
  return s;
}

// The backward's arguments against each other, the cell and the forward's outputs; returns T, B, H.
template <typename Cell>
Shapes check_backward_inputs(const c10::optional<Tensor>& grad_h,
                             const c10::optional<Tensor>& grad_state_n, const Tensor& w_hh,
                             const Tensor& h0, const Tensor& state0, const Tensor& h_all,
                             const Tensor& state_all, const Tensor& saved,
                             const c10::optional<Tensor>& params, const c10::optional<Tensor>& steps,
                             c10::ArrayRef<double> constants, const c10::optional<Tensor>& batch_sizes) {
  const bool packed = batch_sizes.has_value();
  TSRNN_CHECK(h_all.dim() == (packed ? 2 : 3), "tsrnn: h_all must be ", packed ? "[N, H] (packed)" : "[T, B, H]",
              ", got ", h_all.sizes());
  if (packed) check_tensor(h0, "h0", 2, h_all);
  const Shapes s = packed ? Shapes{check_batch_sizes(*batch_sizes), h0.size(0), h_all.size(1)}
                          : Shapes{h_all.size(0), h_all.size(1), h_all.size(2)};
  TSRNN_CHECK(s.T >= 1 && s.B >= 1 && s.H >= 1, "tsrnn: empty input, h_all ", h_all.sizes());
  check_tensor(w_hh, "w_hh", 2, h_all);
  check_layer<Cell>(s, h_all, w_hh, h0, state0, params, steps, constants, packed);
  check_tensor(state_all, "state_all", 4, h_all);
  TSRNN_CHECK(state_all.sizes() == at::IntArrayRef({s.T, Cell::kStates, s.B, s.H}),
              "tsrnn: state_all must be [T, S, B, H], got ", state_all.sizes());
  check_tensor(saved, "saved", saved.dim(), h_all);
  TSRNN_CHECK(saved.dim() == h_all.dim(), "tsrnn: saved must be ", packed ? "[N, " : "[T, B, ",
              Cell::kSaved * s.H, "], got ", saved.sizes(), " (was the forward run with save=false?)");
  for (int64_t d = 0; d + 1 < h_all.dim(); ++d) {
    TSRNN_CHECK(saved.size(d) == h_all.size(d) && saved.size(-1) == Cell::kSaved * s.H, "tsrnn: saved must be ",
                packed ? "[N, " : "[T, B, ", Cell::kSaved * s.H, "], got ", saved.sizes(),
                " (was the forward run with save=false?)");
  }
  if (grad_h) {
    check_tensor(*grad_h, "grad_h", h_all.dim(), h_all);
    TSRNN_CHECK(grad_h->sizes() == h_all.sizes(), "tsrnn: grad_h must be ", h_all.sizes(), ", got ",
                grad_h->sizes());
  }
  if (grad_state_n) {
    check_tensor(*grad_state_n, "grad_state_n", 3, h_all);
    TSRNN_CHECK(grad_state_n->sizes() == state0.sizes(), "tsrnn: grad_state_n must be [",
                Cell::kStates, ", ", s.B, ", ", s.H, "], got ", grad_state_n->sizes());
  }
  return s;
}

// t made contiguous, or none.
inline c10::optional<Tensor> contiguous_or_none(const c10::optional<Tensor>& t) {
  if (!t) return {};
  return t->contiguous();
}

// What a backend's forward reads (contiguous, checked by check_inputs) and fills: h_all
// [T, B, H], state_all [T, S, B, H] and, when `save`, saved [T, B, K*H] (else saved is [0]);
// params [P, H] or none (P = 0), step_input [T, B] or none (Δt = 1), constants [kConstants];
// packed (steps.packed): xg [N, G*H], step_input [N], h_all [N, H], saved [N, K*H].
struct ForwardTensors {
  const Shapes& s;
  const Steps& steps;
  const Tensor &xg, &w_hh, &h0, &state0;
  const c10::optional<Tensor> &params, &step_input;
  c10::ArrayRef<double> constants;
  Products products;
  bool save;
  const Tensor &h_all, &state_all, &saved;
};

// What a backend's backward reads (contiguous, checked by check_backward_inputs) and fills
// (packed: grad_h [N, H], saved [N, K*H], step_input [N], dz [N, G*H]):
// dz [T, B, G*H] = dL/dxg; dh [B, H] zeros in, dL/dh0 out; dstate [S, B, H] dL/dstate_n in,
// dL/dstate0 out; dparams [P, B, H] zeros in, dL/dparams per batch row out (undefined for a cell
// without params).
struct BackwardTensors {
  const Shapes& s;
  const Steps& steps;
  const c10::optional<Tensor>& grad_h;
  const Tensor &w_hh, &state0, &state_all, &saved;
  const c10::optional<Tensor> &params, &step_input;
  c10::ArrayRef<double> constants;
  Products products;
  const Tensor &dz, &dh, &dstate, &dparams;
};

// The entries below take a backend policy `Backend` with what differs between devices:
//   Backend::check_dtype(t)          the dtypes its kernels take, checked first (on xg or h_all)
//   Backend::DeviceGuard(device)     held for the rest of the call (CUDA: the current device)
//   Backend::plan<Cell>(w_hh, s, products)  after the argument checks and before any allocation:
//                                    a Backend::Plan for the time loop, or an error for a shape
//                                    (or precision) the backend does not take
//   Backend::forward<Cell>(plan, ForwardTensors), Backend::backward<Cell>(plan, BackwardTensors):
//                                    the time loop (CPU) or the kernel launch (CUDA)
//   Backend::empty_large(sizes, options), Backend::weight_gemm(out, a, b, accumulate, products):
//                                    the large buffers and dW_hh's GEMMs (AtenBuffersAndGemm's, or
//                                    the CPU's)

// recurrence_forward: h_all, state_n (the last step's states), state_all, saved.
template <typename Backend>
std::tuple<Tensor, Tensor, Tensor, Tensor> recurrence_forward(
    const std::string& cell, const Tensor& xg_in, const Tensor& w_hh_in, const Tensor& h0_in,
    const Tensor& state0_in, const c10::optional<Tensor>& params_in, const c10::optional<Tensor>& steps_in,
    c10::ArrayRef<double> constants, bool save, const c10::optional<Tensor>& batch_sizes,
    const std::string& precision) {
  Backend::check_dtype(xg_in);
  const Products products = products_of(precision);
  const Tensor xg = xg_in.contiguous(), w_hh = w_hh_in.contiguous(), h0 = h0_in.contiguous(),
               state0 = state0_in.contiguous();
  const c10::optional<Tensor> params = contiguous_or_none(params_in), step_input = contiguous_or_none(steps_in);
  const typename Backend::DeviceGuard guard(xg.device());
  Tensor h_all, state_n, state_all, saved;
  dispatch_cell(cell, [&](auto tag) {
    using Cell = decltype(tag);
    const Shapes s = check_inputs<Cell>(xg, w_hh, h0, state0, params, step_input, constants, batch_sizes);
    const Steps steps = steps_of(batch_sizes, s, batch_sizes ? xg.size(0) : s.T * s.B);
    const typename Backend::Plan plan = Backend::template plan<Cell>(w_hh, s, products);
    std::vector<int64_t> rows(xg.sizes().begin(), xg.sizes().end() - 1);  // [T, B] or [N]
    rows.push_back(s.H);
    h_all = Backend::empty_large(rows, xg.options());
    // Packed, the rows a step does not run stay zero: an output of no uninitialized memory.
    state_all = steps.packed ? at::zeros({s.T, Cell::kStates, s.B, s.H}, xg.options())
                             : Backend::empty_large({s.T, Cell::kStates, s.B, s.H}, xg.options());
    rows.back() = Cell::kSaved * s.H;
    saved = save ? Backend::empty_large(rows, xg.options()) : at::empty({0}, xg.options());
    Backend::template forward<Cell>(
        plan, ForwardTensors{s, steps, xg, w_hh, h0, state0, params, step_input, constants, products, save, h_all,
                             state_all, saved});
    state_n = final_states(state_all, state0, steps);
  });
  return {h_all, state_n, state_all, saved};
}

// recurrence_backward: grad_xg (dz), grad_w_hh, grad_h0, grad_state0, grad_params ([P, H]; [0]
// without params).
template <typename Backend>
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> recurrence_backward(
    const std::string& cell, const c10::optional<Tensor>& grad_h_in,
    const c10::optional<Tensor>& grad_state_n, const Tensor& w_hh_in, const Tensor& h0_in,
    const Tensor& state0_in, const Tensor& h_all_in, const Tensor& state_all_in,
    const Tensor& saved_in, const c10::optional<Tensor>& params_in, const c10::optional<Tensor>& steps_in,
    c10::ArrayRef<double> constants, const c10::optional<Tensor>& batch_sizes, const std::string& precision) {
  Backend::check_dtype(h_all_in);
  const Products products = products_of(precision);
  const Tensor w_hh = w_hh_in.contiguous(), h0 = h0_in.contiguous(),
               state0 = state0_in.contiguous(), h_all = h_all_in.contiguous(),
               state_all = state_all_in.contiguous(), saved = saved_in.contiguous();
  const c10::optional<Tensor> params = contiguous_or_none(params_in), step_input = contiguous_or_none(steps_in),
                              grad_h = contiguous_or_none(grad_h_in);
  const typename Backend::DeviceGuard guard(h_all.device());
  Tensor dz, grad_w, dh, dstate, grad_params;
  dispatch_cell(cell, [&](auto tag) {
    using Cell = decltype(tag);
    const Shapes s = check_backward_inputs<Cell>(grad_h, grad_state_n, w_hh, h0, state0, h_all,
                                                 state_all, saved, params, step_input, constants, batch_sizes);
    const Steps steps = steps_of(batch_sizes, s, batch_sizes ? h_all.size(0) : s.T * s.B);
    const typename Backend::Plan plan = Backend::template plan<Cell>(w_hh, s, products);
    std::vector<int64_t> rows(h_all.sizes().begin(), h_all.sizes().end() - 1);  // [T, B] or [N]
    rows.push_back(Cell::kGates * s.H);
    dz = Backend::empty_large(rows, h_all.options());
    dh = at::zeros({s.B, s.H}, h_all.options());
    dstate = grad_state_n ? grad_state_n->clone(at::MemoryFormat::Contiguous)
                          : at::zeros({Cell::kStates, s.B, s.H}, h_all.options());
    const Tensor dparams = params ? at::zeros({Cell::kParams, s.B, s.H}, h_all.options()) : Tensor();
    Backend::template backward<Cell>(plan, BackwardTensors{s, steps, grad_h, w_hh, state0, state_all, saved, params,
                                                           step_input, constants, products, dz, dh, dstate, dparams});
    grad_w = recurrent_weight_grad<Backend>(dz, h0, h_all, steps, products);
    grad_params = params ? dparams.sum(1) : at::empty({0}, h_all.options());
  });
  return {dz, grad_w, dh, dstate, grad_params};
}

}  // namespace tsrnn
