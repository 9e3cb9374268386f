// One recurrent driver for every cell on the CPU (forward and backward).
//
// Forward, per step t: z = xg[t] + h_{t-1} W_hh^T (one GEMM), then the cell's pointwise
// part over B x H in one OpenMP pass. A packed batch (csrc/recurrence/op.h's Steps) runs only the
// rows still active at each step: the GEMM and the cell over rows(t) rows. Forward saves the gate activations and all states: the
// backward then needs no recurrent GEMM to recompute them, only the one that carries dh.
// Backward, per step t (reverse), from dL/d(states)_{T-1} = grad_state_n: the cell's pointwise
// backward gives dz[t], then dh_{t-1} = dz[t] W_hh. After the loop, in the operator entry
// (csrc/recurrence/op.h): dW_hh = dz^T [h_0 .. h_{T-2}] as two GEMMs that read the h's in place
// (recurrent_weight_grad), and dL/dparams as one reduction over B.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <c10/core/InferenceMode.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <vector>

#include "recurrence/cells/list.h"
#include "recurrence/op.h"
#include "gemm/blocked_gemm.h"
#include "gemm/large_buffer.h"
#include "recurrence/cpu/phase_clock.h"
#include "gemm/step_gemm.h"
#include "recurrence/cpu/vector_math.h"
#include "check_message.h"

namespace tsrnn {
namespace {

using at::Tensor;

constexpr int64_t kUnitsPerThread = 32;  // fewer hidden units per thread do not pay for a barrier

// Hidden units [j0, j1) of slice `k` of `slices`, in multiples of 8 units (one AVX2 vector).
struct UnitSlice {
  int64_t j0, n;
};

inline UnitSlice unit_slice(int64_t H, int k, int slices) {
  const int64_t chunk = ((H + slices - 1) / slices + 7) / 8 * 8;
  const int64_t j0 = std::min(H, k * chunk);
  return {j0, std::min(H, j0 + chunk) - j0};
}

// Slices (threads) for H units: at most one per kUnitsPerThread units, at most the ATen threads.
inline int slices_for(int64_t H) {
  return static_cast<int>(std::clamp<int64_t>(H / kUnitsPerThread, 1, at::get_num_threads()));
}

// Keeps the first exception thrown inside an OpenMP region; the other threads skip their work
// but still reach every barrier, and the exception is rethrown after the region.
class RegionError {
 public:
  template <typename F>
  void run(F&& f) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      failed_ = true;
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::mutex mutex_;
};

// Forward of n units of one batch row; pointers are at the row's first unit.
// z: [G] stride zs (h W_hh^T, xg is added here), xg: [G] stride H, act: [K] stride H,
// prev/next: [S] stride BH, h: [n], params: [P] stride H (null when P = 0), step: Δt of the row,
// constant: [kConstants].
template <typename Cell, typename T>
TSRNN_CLONES void forward_units(T* z, int64_t zs, const T* xg, T* act, const T* prev, T* next,
                                T* h, const T* params, T step, const T* constant, int64_t H, int64_t BH, int64_t n) {
  for (int g = 0; g < Cell::kGates; ++g) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) z[g * zs + j] += xg[g * H + j];
  }
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    T param[at_least_one(Cell::kParams)];
    for (int k = 0; k < Cell::kParams; ++k) param[k] = params[k * H + j];
    h[j] = Cell::forward(z + j, zs, act + j, prev + j, next + j, H, BH, param, step, constant);
  }
}

// Backward of n units of one batch row; pointers are at the row's first unit.
// dh: [n] from the step after (grad_h is added in place), grad_h: [n] or null,
// dstate: [S] stride BH (in: dL/d(states)_t, out: dL/d(states)_{t-1}), dz: [G] stride H (out),
// dparams: [P] stride BH accumulated, params: [P] stride H (both null when P = 0).
template <typename Cell, typename T>
TSRNN_CLONES void backward_units(const T* act, const T* prev, const T* next, T* dh,
                                 const T* grad_h, T* dstate, T* dz, T* dparams, const T* params, T step,
                                 const T* constant, int64_t H, int64_t BH, int64_t n) {
  if (grad_h) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dh[j] += grad_h[j];
  }
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    T param[at_least_one(Cell::kParams)], dparam[at_least_one(Cell::kParams)];
    for (int k = 0; k < Cell::kParams; ++k) {
      param[k] = params[k * H + j];
      dparam[k] = dparams[k * BH + j];
    }
    Cell::backward(act + j, prev + j, next + j, dh[j], dstate + j, dz + j, dparam, H, BH, param, step, constant);
    for (int k = 0; k < Cell::kParams; ++k) dparams[k * BH + j] = dparam[k];
  }
}

// The call's constants in T, in a fixed-size array (the cell reads its first kConstants).
template <typename T>
struct CellConstants {
  T value[kMaxConstants] = {};
  explicit CellConstants(c10::ArrayRef<double> constants) {
    for (size_t k = 0; k < constants.size() && k < static_cast<size_t>(kMaxConstants); ++k) {
      value[k] = static_cast<T>(constants[k]);
    }
  }
};

template <typename T>
const T* optional_data(const c10::optional<Tensor>& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

template <typename T>
T* offset_or_null(T* base, int64_t offset) {
  return base ? base + offset : nullptr;
}

// W_hh with its rows regrouped so that each slice's G gate blocks are contiguous:
// rows [G*j0, G*(j0+n)) of the result are gate 0 units j0..j0+n-1, then gate 1, ...
Tensor rows_by_slice(const Tensor& w_hh, int gates, int64_t H, int slices) {
  std::vector<int64_t> order;
  order.reserve(gates * H);
  for (int k = 0; k < slices; ++k) {
    const UnitSlice s = unit_slice(H, k, slices);
    for (int g = 0; g < gates; ++g) {
      for (int64_t j = s.j0; j < s.j0 + s.n; ++j) order.push_back(g * H + j);
    }
  }
  return w_hh.index_select(0, at::tensor(order, at::kLong));
}

// The forward time loop in one OpenMP region: slice k of the hidden units belongs to one
// thread, which computes its units' recurrent product (its rows of W_hh stay in its core's
// cache), adds the input projection, runs the cell, and meets the others at one barrier per step.
template <typename Cell, typename T>
void forward_loop(const Shapes& s, const Steps& steps, const Tensor& xg, const Tensor& w_hh, const Tensor& h0,
                  const Tensor& state0, const T* params, const T* step_input, const CellConstants<T>& constants,
                  const Tensor& h_all,
                  const Tensor& state_all, const Tensor& act, bool save) {
  constexpr int G = Cell::kGates;
  const int64_t H = s.H, B = s.B, BH = B * H, GH = G * H, KH = Cell::kSaved * H;
  const int slices = slices_for(H);
  const Tensor w_sliced = rows_by_slice(w_hh, G, H, slices);
  const int64_t chunk = unit_slice(H, 0, slices).n;
  Tensor z_buffer = at::empty({slices, B * G * chunk}, xg.options());
  const T* xg_data = xg.data_ptr<T>();
  const T* h0_data = h0.data_ptr<T>();
  T* const h_data = h_all.data_ptr<T>();
  const T* const state0_data = state0.data_ptr<T>();
  T* const state_data = state_all.data_ptr<T>();
  T* const act_data = act.data_ptr<T>();
  const T* const w_data = w_sliced.data_ptr<T>();
  RegionError error;
#pragma omp parallel num_threads(slices)
  {
    c10::InferenceMode no_autograd;
    struct Work {
      UnitSlice us;
      T* z;                // [B, G*n] this slice's gates
      StepGemm<T> gemm;    // z = h_{t-1} W_hh[slice rows]^T
    };
    std::vector<Work> mine;
    error.run([&] {
      for (int k = omp_get_thread_num(); k < slices; k += omp_get_num_threads()) {
        const UnitSlice us = unit_slice(H, k, slices);
        mine.push_back({us, z_buffer[k].data_ptr<T>(),
                        StepGemm<T>(w_data + G * us.j0 * H, /*trans_b=*/true, H, G * us.n, H, xg.options())});
      }
    });
    PhaseClock clock(/*forward=*/true);
    for (int64_t t = 0; t < s.T; ++t) {
      error.run([&] {
        const int64_t first = steps.first(t), rows = steps.rows(t);
        const T* h_prev = t == 0 ? h0_data : h_data + steps.first(t - 1) * H;
        const T* prev = t == 0 ? state0_data : state_data + (t - 1) * Cell::kStates * BH;
        T* next = state_data + t * Cell::kStates * BH;
        T* h = h_data + first * H;
        T* a = act_data + (save ? first : 0) * KH;
        for (Work& w : mine) {
          const int64_t n = w.us.n, j0 = w.us.j0;
          w.gemm(rows, h_prev, H, w.z, G * n);
          clock.lap(kForwardGemm);
          for (int64_t b = 0; b < rows; ++b) {
            const int64_t unit = b * H + j0;
            forward_units<Cell, T>(w.z + b * G * n, n, xg_data + (first + b) * GH + j0,
                                   a + b * KH + j0, prev + unit, next + unit, h + unit,
                                   offset_or_null(params, j0), step_input ? step_input[first + b] : T(1),
                                   constants.value, H, BH, n);
          }
          clock.lap(kForwardCell);
        }
      });
#pragma omp barrier
      clock.lap(kForwardWait);
    }
  }
  error.rethrow();
}

// The backward time loop in one OpenMP region, sliced over hidden units like the forward: each
// thread runs its units' cell backward (all gates of dz[t] for those units), meets the others at
// one barrier per step, then forms its columns of dh_{t-1} = dz[t] W_hh[:, units]. Its next
// step reads only those columns, so no second barrier is needed. dstate: in dL/d(states)_{T-1},
// out dL/dstate0.
template <typename Cell, typename T>
void backward_loop(const Shapes& s, const Steps& steps, const T* grad_h, const Tensor& w_hh,
                   const Tensor& state0, const Tensor& state_all, const Tensor& saved,
                   const T* params, const T* step_input, const CellConstants<T>& constants,
                   const Tensor& dz_all, const Tensor& dh, const Tensor& dstate, T* dparams) {
  const int64_t H = s.H, B = s.B, BH = B * H, GH = Cell::kGates * H, KH = Cell::kSaved * H;
  const int64_t SBH = Cell::kStates * BH;
  const int slices = slices_for(H);
  const int64_t chunk = unit_slice(H, 0, slices).n;
  Tensor dh_buffer = at::zeros({slices, B * chunk}, dh.options());
  T* const ds = dstate.data_ptr<T>();
  const T* const state0_data = state0.data_ptr<T>();
  const T* const state_data = state_all.data_ptr<T>();
  const T* const saved_data = saved.data_ptr<T>();
  T* const dz_data = dz_all.data_ptr<T>();
  const T* const w_data = w_hh.data_ptr<T>();
  RegionError error;
#pragma omp parallel num_threads(slices)
  {
    c10::InferenceMode no_autograd;
    struct Work {
      UnitSlice us;
      T* dh;               // [B, n] this slice's columns of dh
      StepGemm<T> gemm;    // dh = dz[t] W_hh[:, slice]
    };
    std::vector<Work> mine;
    error.run([&] {
      for (int k = omp_get_thread_num(); k < slices; k += omp_get_num_threads()) {
        const UnitSlice us = unit_slice(H, k, slices);
        mine.push_back({us, dh_buffer[k].data_ptr<T>(),
                        StepGemm<T>(w_data + us.j0, /*trans_b=*/false, H, us.n, GH, dh.options())});
      }
    });
    PhaseClock clock(/*forward=*/false);
    for (int64_t t = s.T - 1; t >= 0; --t) {
      const int64_t first = steps.first(t), rows = steps.rows(t);
      error.run([&] {
        const T* prev = t == 0 ? state0_data : state_data + (t - 1) * SBH;
        const T* next = state_data + t * SBH;
        const T* a = saved_data + first * KH;
        T* dz = dz_data + first * GH;
        for (Work& w : mine) {
          const int64_t n = w.us.n, j0 = w.us.j0;
          for (int64_t b = 0; b < rows; ++b) {
            const int64_t unit = b * H + j0;
            backward_units<Cell, T>(a + b * KH + j0, prev + unit, next + unit, w.dh + b * n,
                                    offset_or_null(grad_h, (first + b) * H + j0), ds + unit,
                                    dz + b * GH + j0, offset_or_null(dparams, unit),
                                    offset_or_null(params, j0), step_input ? step_input[first + b] : T(1),
                                    constants.value, H, BH, n);
          }
        }
      });
      clock.lap(kBackwardCell);
#pragma omp barrier
      clock.lap(kBackwardWait);
      error.run([&] {
        for (Work& w : mine) w.gemm(rows, dz_data + first * GH, GH, w.dh, w.us.n);
      });
      clock.lap(kBackwardGemm);
    }
  }
  error.rethrow();
  for (int k = 0; k < slices; ++k) {
    const UnitSlice us = unit_slice(H, k, slices);
    dh.narrow(1, us.j0, us.n).copy_(dh_buffer[k].narrow(0, 0, B * us.n).view({B, us.n}));
  }
}

// The CPU side of the recurrence operator's entries (csrc/recurrence/op.h): float32 or float64,
// no device to make current, no launch plan, the large buffers on huge pages, dW_hh through the
// blocked GEMM (float32 with a panel kernel; ATen's otherwise), and the time loops above; every
// precision is computed exactly (Products::kIeee: the CPU has no tensor cores to gain from rounding).
struct CpuRecurrence {
  struct DeviceGuard {
    explicit DeviceGuard(at::Device /*device*/) {}
  };
  struct Plan {};

  static void check_dtype(const Tensor& t) {
    TSRNN_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
                "tsrnn: the CPU kernels take float32 or float64, got ", t.scalar_type());
  }

  template <typename Cell>
  static Plan plan(const Tensor& /*w_hh*/, const Shapes& /*s*/, Products /*products*/) {
    return {};
  }

  static Tensor empty_large(at::IntArrayRef sizes, const at::TensorOptions& options) {
    return tsrnn::empty_large(sizes, options);
  }

  static void weight_gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate,
                          Products /*products*/) {
    const float* init = accumulate ? static_cast<const float*>(out.data_ptr()) : nullptr;  // read if float32
    if (!blocked_gemm(out, a.t(), b, init, out.stride(0), nullptr)) {
      AtenBuffersAndGemm::weight_gemm(out, a, b, accumulate, Products::kIeee);
    }
  }

  // Without save, the activations of one step are written over at every step.
  template <typename Cell>
  static void forward(const Plan& /*plan*/, const ForwardTensors& io) {
    const Tensor act = io.save ? io.saved
                               : at::empty({1, io.s.B, Cell::kSaved * io.s.H}, io.xg.options());
    AT_DISPATCH_FLOATING_TYPES(io.xg.scalar_type(), "tsrnn_recurrence_forward", [&] {
      forward_loop<Cell, scalar_t>(io.s, io.steps, io.xg, io.w_hh, io.h0, io.state0,
                                   optional_data<scalar_t>(io.params), optional_data<scalar_t>(io.step_input),
                                   CellConstants<scalar_t>(io.constants), io.h_all, io.state_all, act, io.save);
    });
  }

  template <typename Cell>
  static void backward(const Plan& /*plan*/, const BackwardTensors& io) {
    AT_DISPATCH_FLOATING_TYPES(io.dz.scalar_type(), "tsrnn_recurrence_backward", [&] {
      backward_loop<Cell, scalar_t>(io.s, io.steps, optional_data<scalar_t>(io.grad_h), io.w_hh, io.state0,
                                    io.state_all, io.saved, optional_data<scalar_t>(io.params),
                                    optional_data<scalar_t>(io.step_input), CellConstants<scalar_t>(io.constants),
                                    io.dz, io.dh, io.dstate,
                                    io.dparams.defined() ? io.dparams.data_ptr<scalar_t>() : nullptr);
    });
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn, CPU, m) {
  m.impl("recurrence_forward", &recurrence_forward<CpuRecurrence>);
  m.impl("recurrence_backward", &recurrence_backward<CpuRecurrence>);
}

}  // namespace tsrnn
