// What the recurrence operators' CPU (csrc/cpu/recurrence.cpp) and CUDA (csrc/cuda/binding.cpp)
// kernels share: the argument checks (one error message per wrong shape, dtype or device) and
// the recurrent weight gradient.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "cells.h"

namespace tsrnn {

using at::Tensor;

// Calls fn with the cell type named by `cell`.
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

template <typename Cell>
Shapes check_inputs(const Tensor& xg, const Tensor& w_hh, const Tensor& h0, const Tensor& state0,
                    const c10::optional<Tensor>& p, const c10::optional<Tensor>& dt) {
  check_tensor(xg, "xg", 3, xg);
  check_tensor(w_hh, "w_hh", 2, xg);
  const Shapes s{xg.size(0), xg.size(1), w_hh.size(1)};
  TORCH_CHECK(s.T >= 1 && s.B >= 1 && s.H >= 1, "tsrnn: empty input, xg ", xg.sizes());
  TORCH_CHECK(w_hh.size(0) == Cell::kGates * s.H, "tsrnn: w_hh must be [", Cell::kGates * s.H,
              ", ", s.H, "], got ", w_hh.sizes());
  TORCH_CHECK(xg.size(2) == Cell::kGates * s.H, "tsrnn: xg must be [T, B, ", Cell::kGates * s.H,
              "], got ", xg.sizes());
  check_tensor(h0, "h0", 2, xg);
  TORCH_CHECK(h0.size(0) == s.B && h0.size(1) == s.H, "tsrnn: h0 must be [", s.B, ", ", s.H,
              "], got ", h0.sizes());
  check_tensor(state0, "state0", 3, xg);
  TORCH_CHECK(state0.size(0) == Cell::kStates && state0.size(1) == s.B && state0.size(2) == s.H,
              "tsrnn: state0 must be [", Cell::kStates, ", ", s.B, ", ", s.H, "], got ",
              state0.sizes());
  const bool power_law = Cell::kStates == 2;
  TORCH_CHECK(p.has_value() == power_law, "tsrnn: p is ", power_law ? "required" : "not used",
              " for this cell");
  if (p) {
    check_tensor(*p, "p", 1, xg);
    TORCH_CHECK(p->size(0) == s.H, "tsrnn: p must be [", s.H, "], got ", p->sizes());
  }
  if (dt) {
    TORCH_CHECK(power_law, "tsrnn: dt is only used by the pLSTM cells");
    check_tensor(*dt, "dt", 2, xg);
    TORCH_CHECK(dt->size(0) == s.T && dt->size(1) == s.B, "tsrnn: dt must be [", s.T, ", ", s.B,
                "], got ", dt->sizes());
  }
  return s;
}

// The backward's arguments, against each other and against the forward's; returns T, B, H.
template <typename Cell>
Shapes check_backward_inputs(const c10::optional<Tensor>& grad_h, const c10::optional<Tensor>& grad_state,
                             const Tensor& w_hh, const Tensor& h0, const Tensor& state0,
                             const Tensor& h_all, const Tensor& state_all, const Tensor& saved,
                             const c10::optional<Tensor>& p, const c10::optional<Tensor>& dt) {
  TORCH_CHECK(h_all.dim() == 3, "tsrnn: h_all must be [T, B, H], got ", h_all.sizes());
  const int64_t T = h_all.size(0), B = h_all.size(1), H = h_all.size(2);
  const Tensor xg_like = at::empty({1}, h_all.options()).expand({T, B, Cell::kGates * H});  // shape only
  const Shapes s = check_inputs<Cell>(xg_like, w_hh, h0, state0, p, dt);
  check_tensor(state_all, "state_all", 4, h_all);
  check_tensor(saved, "saved", saved.dim(), h_all);
  TORCH_CHECK(state_all.sizes() == at::IntArrayRef({T, Cell::kStates, B, H}),
              "tsrnn: state_all must be [T, S, B, H], got ", state_all.sizes());
  TORCH_CHECK(saved.sizes() == at::IntArrayRef({T, B, Cell::kSaved * H}),
              "tsrnn: saved must be [T, B, ", Cell::kSaved * H, "], got ", saved.sizes(),
              " (was the forward run with save=false?)");
  if (grad_h) {
    check_tensor(*grad_h, "grad_h", 3, h_all);
    TORCH_CHECK(grad_h->sizes() == h_all.sizes(), "tsrnn: grad_h must match h_all");
  }
  if (grad_state) {
    check_tensor(*grad_state, "grad_state", 4, h_all);
    TORCH_CHECK(grad_state->sizes() == state_all.sizes(), "tsrnn: grad_state must match state_all");
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

}  // namespace tsrnn
