// One recurrent driver for every cell on the CPU (forward and backward).
//
// Forward, per step t: z = xg[t] + h_{t-1} W_hh^T (one ATen GEMM), then the cell's pointwise
// part over B x H in one OpenMP pass. Forward saves the gate activations and all states: the
// backward then needs no recurrent GEMM to recompute them, only the one that carries dh.
// Backward, per step t (reverse): the cell's pointwise backward gives dz[t], then
// dh_{t-1} = dz[t] W_hh. After the loop: dW_hh = dz^T [h_0 .. h_{T-2}] as one GEMM over T*B,
// and dp as one reduction over B.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "cpu/cells.h"
#include "cpu/vector_math.h"

namespace tsrnn {
namespace {

using at::Tensor;

constexpr int64_t kGrain = 512;  // units per OpenMP task

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

void check_tensor(const Tensor& t, const char* name, int64_t dim, const Tensor& like) {
  TORCH_CHECK(t.dim() == dim, "tsrnn: ", name, " must have ", dim, " dimensions, got ", t.sizes());
  TORCH_CHECK(t.device().is_cpu(), "tsrnn: ", name, " must be a CPU tensor, got ", t.device());
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
  TORCH_CHECK(xg.scalar_type() == at::kFloat || xg.scalar_type() == at::kDouble,
              "tsrnn: the CPU kernels take float32 or float64, got ", xg.scalar_type());
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

// Calls f(b, j0, j1) for each batch row b that the flat unit range [begin, end) of B*H touches.
template <typename F>
inline void for_row_spans(int64_t begin, int64_t end, int64_t H, F&& f) {
  for (int64_t n = begin; n < end;) {
    const int64_t b = n / H, j0 = n - b * H, j1 = std::min(H, j0 + (end - n));
    f(b, j0, j1);
    n += j1 - j0;
  }
}

// Forward of units [j0, j1) of one batch row; pointers are at the row's start.
// z: [G*H], act: [K*H], prev/next: [S] stride BH, h: [H], p: [H] or null.
template <typename Cell, typename T>
TSRNN_CLONES void forward_units(const T* z, T* act, const T* prev, T* next, T* h, const T* p, T dt,
                                T eps, int64_t H, int64_t BH, int64_t j0, int64_t j1) {
#pragma omp simd
  for (int64_t j = j0; j < j1; ++j) {
    const UnitParams<T> u{p ? p[j] : T(0), dt, eps};
    h[j] = Cell::forward(z + j, act + j, prev + j, next + j, H, BH, u);
  }
}

// Backward of units [j0, j1) of one batch row; pointers are at the row's start.
// dh: [H] from the step after, grad_h: [H] or null, grad_state: [S] stride BH or null,
// dstate: [S] stride BH (in/out), dz: [G*H] out, dp: [H] accumulated or null.
template <typename Cell, typename T>
TSRNN_CLONES void backward_units(const T* act, const T* prev, const T* next, const T* dh,
                                 const T* grad_h, const T* grad_state, T* dstate, T* dz, T* dp,
                                 const T* p, T dt, T eps, int64_t H, int64_t BH, int64_t j0,
                                 int64_t j1) {
#pragma omp simd
  for (int64_t j = j0; j < j1; ++j) {
    if (grad_state) {
      for (int k = 0; k < Cell::kStates; ++k) dstate[k * BH + j] += grad_state[k * BH + j];
    }
    const T dh_j = dh[j] + (grad_h ? grad_h[j] : T(0));
    const UnitParams<T> u{p ? p[j] : T(0), dt, eps};
    Cell::backward(act + j, prev + j, next + j, dh_j, dstate + j, dz + j, dp ? dp + j : nullptr,
                   H, BH, u);
  }
}

template <typename T>
const T* optional_data(const c10::optional<Tensor>& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

template <typename Cell, typename T>
void forward_loop(const Shapes& s, const Tensor& xg, const Tensor& w_hh, const Tensor& h0,
                  const Tensor& state0, const T* p, const T* dt, T eps, Tensor& h_all,
                  Tensor& state_all, Tensor& act) {
  const int64_t H = s.H, B = s.B, BH = B * H, GH = Cell::kGates * H, KH = Cell::kSaved * H;
  const bool save = act.size(0) == s.T;
  Tensor z = at::empty({B, GH}, xg.options());
  const Tensor w_t = w_hh.t();
  T* const z_data = z.data_ptr<T>();
  for (int64_t t = 0; t < s.T; ++t) {
    at::addmm_out(z, xg[t], t == 0 ? h0 : h_all[t - 1], w_t);
    const T* prev = t == 0 ? state0.data_ptr<T>() : state_all[t - 1].data_ptr<T>();
    T* next = state_all[t].data_ptr<T>();
    T* h = h_all[t].data_ptr<T>();
    T* a = act[save ? t : 0].data_ptr<T>();
    at::parallel_for(0, BH, kGrain, [&](int64_t begin, int64_t end) {
      for_row_spans(begin, end, H, [&](int64_t b, int64_t j0, int64_t j1) {
        forward_units<Cell, T>(z_data + b * GH, a + b * KH, prev + b * H, next + b * H, h + b * H,
                               p, dt ? dt[t * B + b] : T(1), eps, H, BH, j0, j1);
      });
    });
  }
}

std::tuple<Tensor, Tensor, Tensor> recurrence_forward(
    const std::string& cell, const Tensor& xg_in, const Tensor& w_hh_in, const Tensor& h0_in,
    const Tensor& state0_in, const c10::optional<Tensor>& p_in,
    const c10::optional<Tensor>& dt_in, double eps, bool save) {
  const Tensor xg = xg_in.contiguous(), w_hh = w_hh_in.contiguous(), h0 = h0_in.contiguous(),
               state0 = state0_in.contiguous();
  c10::optional<Tensor> p, dt;
  if (p_in) p = p_in->contiguous();
  if (dt_in) dt = dt_in->contiguous();
  Tensor h_all, state_all, saved;
  dispatch_cell(cell, [&](auto cell_tag) {
    using Cell = decltype(cell_tag);
    const Shapes s = check_inputs<Cell>(xg, w_hh, h0, state0, p, dt);
    h_all = at::empty({s.T, s.B, s.H}, xg.options());
    state_all = at::empty({s.T, Cell::kStates, s.B, s.H}, xg.options());
    Tensor act = at::empty({save ? s.T : 1, s.B, Cell::kSaved * s.H}, xg.options());
    AT_DISPATCH_FLOATING_TYPES(xg.scalar_type(), "tsrnn_recurrence_forward", [&] {
      forward_loop<Cell, scalar_t>(s, xg, w_hh, h0, state0, optional_data<scalar_t>(p),
                                   optional_data<scalar_t>(dt), static_cast<scalar_t>(eps), h_all,
                                   state_all, act);
    });
    saved = save ? act : at::empty({0}, xg.options());
  });
  return {h_all, state_all, saved};
}

template <typename Cell, typename T>
void backward_loop(const Shapes& s, const T* grad_h, const T* grad_state, const Tensor& w_hh,
                   const Tensor& state0, const Tensor& state_all, const Tensor& saved,
                   const T* p, const T* dt, T eps, Tensor& dz_all, Tensor& dh, Tensor& dstate,
                   T* dp) {
  const int64_t H = s.H, B = s.B, BH = B * H, GH = Cell::kGates * H, KH = Cell::kSaved * H;
  const int64_t SBH = Cell::kStates * BH;
  T* const dh_data = dh.data_ptr<T>();
  T* const ds = dstate.data_ptr<T>();
  for (int64_t t = s.T - 1; t >= 0; --t) {
    const T* prev = t == 0 ? state0.data_ptr<T>() : state_all[t - 1].data_ptr<T>();
    const T* next = state_all[t].data_ptr<T>();
    const T* a = saved[t].data_ptr<T>();
    T* dz = dz_all[t].data_ptr<T>();
    at::parallel_for(0, BH, kGrain, [&](int64_t begin, int64_t end) {
      for_row_spans(begin, end, H, [&](int64_t b, int64_t j0, int64_t j1) {
        const int64_t row = b * H;
        backward_units<Cell, T>(a + b * KH, prev + row, next + row, dh_data + row,
                                grad_h ? grad_h + t * BH + row : nullptr,
                                grad_state ? grad_state + t * SBH + row : nullptr, ds + row,
                                dz + b * GH, dp ? dp + row : nullptr, p,
                                dt ? dt[t * B + b] : T(1), eps, H, BH, j0, j1);
      });
    });
    at::mm_out(dh, dz_all[t], w_hh);
  }
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> recurrence_backward(
    const std::string& cell, const c10::optional<Tensor>& grad_h_in,
    const c10::optional<Tensor>& grad_state_in, const Tensor& w_hh_in, const Tensor& h0_in,
    const Tensor& state0_in, const Tensor& h_all_in, const Tensor& state_all_in,
    const Tensor& saved_in, const c10::optional<Tensor>& p_in, const c10::optional<Tensor>& dt_in,
    double eps) {
  const Tensor w_hh = w_hh_in.contiguous(), h0 = h0_in.contiguous(),
               state0 = state0_in.contiguous(), h_all = h_all_in.contiguous(),
               state_all = state_all_in.contiguous(), saved = saved_in.contiguous();
  c10::optional<Tensor> p, dt, grad_h, grad_state;
  if (p_in) p = p_in->contiguous();
  if (dt_in) dt = dt_in->contiguous();
  if (grad_h_in) grad_h = grad_h_in->contiguous();
  if (grad_state_in) grad_state = grad_state_in->contiguous();
  Tensor dz_all, grad_w, dh, dstate, grad_p;
  dispatch_cell(cell, [&](auto cell_tag) {
    using Cell = decltype(cell_tag);
    TORCH_CHECK(h_all.dim() == 3, "tsrnn: h_all must be [T, B, H], got ", h_all.sizes());
    const int64_t T = h_all.size(0), B = h_all.size(1), H = h_all.size(2);
    const Tensor xg_like = at::empty({T, B, Cell::kGates * H}, h_all.options());
    const Shapes s = check_inputs<Cell>(xg_like, w_hh, h0, state0, p, dt);
    check_tensor(state_all, "state_all", 4, h_all);
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
    dz_all = at::empty({T, B, Cell::kGates * H}, h_all.options());
    dh = at::zeros({B, H}, h_all.options());
    dstate = at::zeros({Cell::kStates, B, H}, h_all.options());
    Tensor dp = p ? at::zeros({B, H}, h_all.options()) : at::Tensor();
    AT_DISPATCH_FLOATING_TYPES(h_all.scalar_type(), "tsrnn_recurrence_backward", [&] {
      backward_loop<Cell, scalar_t>(s, optional_data<scalar_t>(grad_h),
                                    optional_data<scalar_t>(grad_state), w_hh, state0, state_all,
                                    saved, optional_data<scalar_t>(p), optional_data<scalar_t>(dt),
                                    static_cast<scalar_t>(eps), dz_all, dh, dstate,
                                    dp.defined() ? dp.data_ptr<scalar_t>() : nullptr);
    });
    const Tensor h_prev = at::cat({h0.unsqueeze(0), h_all.narrow(0, 0, T - 1)}).view({T * B, H});
    grad_w = dz_all.view({T * B, Cell::kGates * H}).t().mm(h_prev);
    grad_p = p ? dp.sum(0) : at::empty({0}, h_all.options());
  });
  return {dz_all, grad_w, dh, dstate, grad_p};
}

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn, CPU, m) {
  m.impl("recurrence_forward", &recurrence_forward);
  m.impl("recurrence_backward", &recurrence_backward);
}

}  // namespace tsrnn
