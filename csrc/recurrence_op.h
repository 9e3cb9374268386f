// The recurrence operator's entries, recurrence_forward and recurrence_backward (schemas in
// tsrnn/ops.py), one template each over a backend policy: CpuRecurrence (csrc/cpu/recurrence.cpp)
// runs the OpenMP time loop, CudaRecurrence (csrc/cuda/binding.cpp) the cooperative kernel
// launch. Here is what they share: contiguity, the cell dispatch, the argument checks (one error
// message per wrong shape, dtype or device; tsrnn/ops.py checks the same for the fake and the
// Triton kernels), the outputs' allocation, the final states, the recurrent weight gradient and dp.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <tuple>

#include "cells.h"

namespace tsrnn {

using at::Tensor;

// Calls fn with a value of the cell type (csrc/cells.h) named by `cell`.
template <typename Fn>
void dispatch_cell(const std::string& cell, Fn&& fn) {
  if (cell == "lstm") {
    fn(LSTMCell{});
  } else if (cell == "plstm_coupled") {
    fn(PowerLawCell<true>{});
  } else if (cell == "plstm_separate") {
    fn(PowerLawCell<false>{});
  } else {
    TORCH_CHECK(false, "tsrnn: unknown cell '", cell,
                "', expected 'lstm', 'plstm_coupled' or 'plstm_separate'");
  }
}

// t has `dim` dimensions and the device and dtype of `like`.
inline void check_tensor(const Tensor& t, const char* name, int64_t dim, const Tensor& like) {
  TORCH_CHECK(t.dim() == dim, "tsrnn: ", name, " must have ", dim, " dimensions, got ", t.sizes());
  TORCH_CHECK(t.device() == like.device(), "tsrnn: ", name, " is on ", t.device(), ", expected ",
              like.device());
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "tsrnn: ", name, " has dtype ",
              t.scalar_type(), ", expected ", like.scalar_type());
}

// Shapes of one call, checked once: T steps, B rows, H units.
struct Shapes {
  int64_t T, B, H;
};

// What both directions take besides their own tensors, against s and the device and dtype of
// `like`: w_hh (its rank checked by the caller) [G*H, H], h0 [B, H], state0 [S, B, H], p [H]
// (exactly for the cells with p), dt [T, B] (pLSTM, optional).
template <typename Cell>
void check_layer(const Shapes& s, const Tensor& like, const Tensor& w_hh, const Tensor& h0,
                 const Tensor& state0, const c10::optional<Tensor>& p,
                 const c10::optional<Tensor>& dt) {
  TORCH_CHECK(w_hh.size(0) == Cell::kGates * s.H && w_hh.size(1) == s.H, "tsrnn: w_hh must be [",
              Cell::kGates * s.H, ", ", s.H, "], got ", w_hh.sizes());
  check_tensor(h0, "h0", 2, like);
  TORCH_CHECK(h0.size(0) == s.B && h0.size(1) == s.H, "tsrnn: h0 must be [", s.B, ", ", s.H,
              "], got ", h0.sizes());
  check_tensor(state0, "state0", 3, like);
  TORCH_CHECK(state0.size(0) == Cell::kStates && state0.size(1) == s.B && state0.size(2) == s.H,
              "tsrnn: state0 must be [", Cell::kStates, ", ", s.B, ", ", s.H, "], got ",
              state0.sizes());
  TORCH_CHECK(p.has_value() == Cell::kHasP, "tsrnn: p is ", Cell::kHasP ? "required" : "not used",
              " for this cell");
  if (p) {
    check_tensor(*p, "p", 1, like);
    TORCH_CHECK(p->size(0) == s.H, "tsrnn: p must be [", s.H, "], got ", p->sizes());
  }
  if (dt) {
    TORCH_CHECK(Cell::kHasP, "tsrnn: dt is only used by the pLSTM cells");
    check_tensor(*dt, "dt", 2, like);
    TORCH_CHECK(dt->size(0) == s.T && dt->size(1) == s.B, "tsrnn: dt must be [", s.T, ", ", s.B,
                "], got ", dt->sizes());
  }
}

// The forward's arguments against each other and the cell; returns T, B, H.
template <typename Cell>
Shapes check_inputs(const Tensor& xg, const Tensor& w_hh, const Tensor& h0, const Tensor& state0,
                    const c10::optional<Tensor>& p, const c10::optional<Tensor>& dt) {
  check_tensor(xg, "xg", 3, xg);
  check_tensor(w_hh, "w_hh", 2, xg);
  const Shapes s{xg.size(0), xg.size(1), w_hh.size(1)};
  TORCH_CHECK(s.T >= 1 && s.B >= 1 && s.H >= 1, "tsrnn: empty input, xg ", xg.sizes());
  check_layer<Cell>(s, xg, w_hh, h0, state0, p, dt);
  TORCH_CHECK(xg.size(2) == Cell::kGates * s.H, "tsrnn: xg must be [T, B, ", Cell::kGates * s.H,
              "], got ", xg.sizes());
  return s;
}

// The backward's arguments against each other, the cell and the forward's outputs; returns T, B, H.
template <typename Cell>
Shapes check_backward_inputs(const c10::optional<Tensor>& grad_h,
                             const c10::optional<Tensor>& grad_state_n, const Tensor& w_hh,
                             const Tensor& h0, const Tensor& state0, const Tensor& h_all,
                             const Tensor& state_all, const Tensor& saved,
                             const c10::optional<Tensor>& p, const c10::optional<Tensor>& dt) {
  TORCH_CHECK(h_all.dim() == 3, "tsrnn: h_all must be [T, B, H], got ", h_all.sizes());
  const Shapes s{h_all.size(0), h_all.size(1), h_all.size(2)};
  TORCH_CHECK(s.T >= 1 && s.B >= 1 && s.H >= 1, "tsrnn: empty input, h_all ", h_all.sizes());
  check_tensor(w_hh, "w_hh", 2, h_all);
  check_layer<Cell>(s, h_all, w_hh, h0, state0, p, dt);
  check_tensor(state_all, "state_all", 4, h_all);
  TORCH_CHECK(state_all.sizes() == at::IntArrayRef({s.T, Cell::kStates, s.B, s.H}),
              "tsrnn: state_all must be [T, S, B, H], got ", state_all.sizes());
  check_tensor(saved, "saved", saved.dim(), h_all);
  TORCH_CHECK(saved.sizes() == at::IntArrayRef({s.T, s.B, Cell::kSaved * s.H}),
              "tsrnn: saved must be [T, B, ", Cell::kSaved * s.H, "], got ", saved.sizes(),
              " (was the forward run with save=false?)");
  if (grad_h) {
    check_tensor(*grad_h, "grad_h", 3, h_all);
    TORCH_CHECK(grad_h->sizes() == h_all.sizes(), "tsrnn: grad_h must be [", s.T, ", ", s.B, ", ",
                s.H, "], got ", grad_h->sizes());
  }
  if (grad_state_n) {
    check_tensor(*grad_state_n, "grad_state_n", 3, h_all);
    TORCH_CHECK(grad_state_n->sizes() == state0.sizes(), "tsrnn: grad_state_n must be [",
                Cell::kStates, ", ", s.B, ", ", s.H, "], got ", grad_state_n->sizes());
  }
  return s;
}

// dW_hh = sum_t dz[t]^T h_{t-1} = dz[0]^T h0 + dz[1:]^T h_all[:-1] (two GEMMs, no copy of the h's).
// dz: [T, B, G*H], h0: [B, H], h_all: [T, B, H].
inline Tensor recurrent_weight_grad(const Tensor& dz, const Tensor& h0, const Tensor& h_all) {
  const int64_t T = dz.size(0), B = dz.size(1), GH = dz.size(2), H = h0.size(1);
  Tensor grad = dz[0].t().mm(h0);
  if (T > 1) {
    grad.addmm_(dz.narrow(0, 1, T - 1).reshape({(T - 1) * B, GH}).t(),
                h_all.narrow(0, 0, T - 1).reshape({(T - 1) * B, H}));
  }
  return grad;
}

// t made contiguous, or none.
inline c10::optional<Tensor> contiguous_or_none(const c10::optional<Tensor>& t) {
  if (!t) return {};
  return t->contiguous();
}

// What a backend's forward reads (contiguous, checked by check_inputs) and fills: h_all
// [T, B, H], state_all [T, S, B, H] and, when `save`, saved [T, B, K*H] (else saved is [0]).
struct ForwardTensors {
  const Shapes& s;
  const Tensor &xg, &w_hh, &h0, &state0;
  const c10::optional<Tensor> &p, &dt;
  double eps;
  bool save;
  const Tensor &h_all, &state_all, &saved;
};

// What a backend's backward reads (contiguous, checked by check_backward_inputs) and fills:
// dz [T, B, G*H] = dL/dxg; dh [B, H] zeros in, dL/dh0 out; dstate [S, B, H] dL/dstate_n in,
// dL/dstate0 out; dp [B, H] zeros in, dL/dp per batch row out (undefined for cells without p).
struct BackwardTensors {
  const Shapes& s;
  const c10::optional<Tensor>& grad_h;
  const Tensor &w_hh, &state0, &state_all, &saved;
  const c10::optional<Tensor> &p, &dt;
  double eps;
  const Tensor &dz, &dh, &dstate, &dp;
};

// The entries below take a backend policy `Backend` with what differs between devices:
//   Backend::check_dtype(t)          the dtypes its kernels take, checked first (on xg or h_all)
//   Backend::DeviceGuard(device)     held for the rest of the call (CUDA: the current device)
//   Backend::plan<Cell>(w_hh, s)     after the argument checks and before any allocation: a
//                                    Backend::Plan for the time loop, or an error for a shape the
//                                    backend does not take
//   Backend::forward<Cell>(plan, ForwardTensors), Backend::backward<Cell>(plan, BackwardTensors):
//                                    the time loop (CPU) or the kernel launch (CUDA)
//   Backend::ExactGemm               held around dW_hh's GEMMs (CUDA: no TF32)

// recurrence_forward: h_all, state_n (the last step's states), state_all, saved.
template <typename Backend>
std::tuple<Tensor, Tensor, Tensor, Tensor> recurrence_forward(
    const std::string& cell, const Tensor& xg_in, const Tensor& w_hh_in, const Tensor& h0_in,
    const Tensor& state0_in, const c10::optional<Tensor>& p_in, const c10::optional<Tensor>& dt_in,
    double eps, bool save) {
  Backend::check_dtype(xg_in);
  const Tensor xg = xg_in.contiguous(), w_hh = w_hh_in.contiguous(), h0 = h0_in.contiguous(),
               state0 = state0_in.contiguous();
  const c10::optional<Tensor> p = contiguous_or_none(p_in), dt = contiguous_or_none(dt_in);
  const typename Backend::DeviceGuard guard(xg.device());
  Tensor h_all, state_n, state_all, saved;
  dispatch_cell(cell, [&](auto tag) {
    using Cell = decltype(tag);
    const Shapes s = check_inputs<Cell>(xg, w_hh, h0, state0, p, dt);
    const typename Backend::Plan plan = Backend::template plan<Cell>(w_hh, s);
    h_all = at::empty({s.T, s.B, s.H}, xg.options());
    state_all = at::empty({s.T, Cell::kStates, s.B, s.H}, xg.options());
    saved = save ? at::empty({s.T, s.B, Cell::kSaved * s.H}, xg.options())
                 : at::empty({0}, xg.options());
    Backend::template forward<Cell>(
        plan, ForwardTensors{s, xg, w_hh, h0, state0, p, dt, eps, save, h_all, state_all, saved});
    state_n = state_all[s.T - 1].clone();
  });
  return {h_all, state_n, state_all, saved};
}

// recurrence_backward: grad_xg (dz), grad_w_hh, grad_h0, grad_state0, grad_p ([0] without p).
template <typename Backend>
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> recurrence_backward(
    const std::string& cell, const c10::optional<Tensor>& grad_h_in,
    const c10::optional<Tensor>& grad_state_n, const Tensor& w_hh_in, const Tensor& h0_in,
    const Tensor& state0_in, const Tensor& h_all_in, const Tensor& state_all_in,
    const Tensor& saved_in, const c10::optional<Tensor>& p_in, const c10::optional<Tensor>& dt_in,
    double eps) {
  Backend::check_dtype(h_all_in);
  const Tensor w_hh = w_hh_in.contiguous(), h0 = h0_in.contiguous(),
               state0 = state0_in.contiguous(), h_all = h_all_in.contiguous(),
               state_all = state_all_in.contiguous(), saved = saved_in.contiguous();
  const c10::optional<Tensor> p = contiguous_or_none(p_in), dt = contiguous_or_none(dt_in),
                              grad_h = contiguous_or_none(grad_h_in);
  const typename Backend::DeviceGuard guard(h_all.device());
  Tensor dz, grad_w, dh, dstate, grad_p;
  dispatch_cell(cell, [&](auto tag) {
    using Cell = decltype(tag);
    const Shapes s = check_backward_inputs<Cell>(grad_h, grad_state_n, w_hh, h0, state0, h_all,
                                                 state_all, saved, p, dt);
    const typename Backend::Plan plan = Backend::template plan<Cell>(w_hh, s);
    dz = at::empty({s.T, s.B, Cell::kGates * s.H}, h_all.options());
    dh = at::zeros({s.B, s.H}, h_all.options());
    dstate = grad_state_n ? grad_state_n->clone(at::MemoryFormat::Contiguous)
                          : at::zeros({Cell::kStates, s.B, s.H}, h_all.options());
    const Tensor dp = p ? at::zeros({s.B, s.H}, h_all.options()) : Tensor();
    Backend::template backward<Cell>(plan, BackwardTensors{s, grad_h, w_hh, state0, state_all,
                                                           saved, p, dt, eps, dz, dh, dstate, dp});
    const typename Backend::ExactGemm exact;
    grad_w = recurrent_weight_grad(dz, h0, h_all);
    grad_p = p ? dp.sum(0) : at::empty({0}, h_all.options());
  });
  return {dz, grad_w, dh, dstate, grad_p};
}

}  // namespace tsrnn
