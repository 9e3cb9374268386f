// (S9) The power-law forget-gate LSTM in age form (tsrnn/ops/recurrence/cells/plstm.py), states
// (c, a), gates (r, g, o) coupled (i = 1 - f) or (i, r, g, o) separate (i = σ(z_i)):
//   r = σ(z_r),  a_t = (1 - r)(a_{t-1} + Δt)
//   f = ((a_t + 1) / ((1 - r)(a_{t-1} + 1) + ε))^{-p}
//   c_t = f c_{t-1} + i tanh(z_g),   h_t = σ(z_o) tanh(c_t)
// param[0] = p, the unit's decay exponent; step = Δt (1 where the call gives none); constant[0] = ε.
//
// forward: z [kGates] stride zs, act [kSaved] stride H out (f, r, g, o[, i]), prev/next [2]
// stride BH ((c, a)_{t-1} in, (c, a)_t out); returns h_t.
// backward: dh = dL/dh_t; dstate (dc, da) stride BH, in w.r.t. step t, out w.r.t. step t-1;
// dz [kGates] stride H out; dparam[0] += dL/dp of this step. With N = a_t + 1 and
// D = (1 - r)(a_{t-1} + 1) + ε: log f = -p (log N - log D).
#pragma once

#include "recurrence/cells/cell_math.h"

namespace tsrnn {

template <bool Coupled>
struct PowerLawCell {
  static constexpr const char* kName = Coupled ? "plstm_coupled" : "plstm_separate";
  static constexpr int kGates = Coupled ? 3 : 4, kStates = 2, kSaved = Coupled ? 4 : 5;
  static constexpr int kParams = 1, kConstants = 1;  // p; ε
  static constexpr bool kStepInput = true;           // Δt
  static constexpr int kR = Coupled ? 0 : 1;         // gate row of r; g and o follow it

  template <typename T>
  TSRNN_HOST_DEVICE static inline T forward(const T* z, int64_t zs, T* act, const T* prev, T* next, int64_t H,
                                            int64_t BH, const T* param, T step, const T* constant) {
    const T p = param[0], eps = constant[0];
    const T r = sigmoid(z[kR * zs]), g = std::tanh(z[(kR + 1) * zs]), o = sigmoid(z[(kR + 2) * zs]);
    const T s = T(1) - r, a_prev = prev[BH];
    const T a = s * (a_prev + step);
    const T f = std::pow((a + T(1)) / (s * (a_prev + T(1)) + eps), -p);
    const T i = Coupled ? T(1) - f : sigmoid(z[0]);
    const T c = f * prev[0] + i * g;
    act[0] = f;
    act[H] = r;
    act[2 * H] = g;
    act[3 * H] = o;
    if (!Coupled) act[4 * H] = i;
    next[0] = c;
    next[BH] = a;
    return o * std::tanh(c);
  }

  template <typename T>
  TSRNN_HOST_DEVICE static inline void backward(const T* act, const T* prev, const T* next, T dh, T* dstate, T* dz,
                                                T* dparam, int64_t H, int64_t BH, const T* param, T step,
                                                const T* constant) {
    const T p = param[0], eps = constant[0];
    const T f = act[0], r = act[H], g = act[2 * H], o = act[3 * H];
    const T i = Coupled ? T(1) - f : act[4 * H];
    const T c_prev = prev[0], a_prev = prev[BH];
    const T s = T(1) - r;
    const T N = next[BH] + T(1), D = s * (a_prev + T(1)) + eps;
    const T tc = std::tanh(next[0]);
    const T dc = dstate[0] + dh * o * (T(1) - tc * tc);
    const T df = Coupled ? dc * (c_prev - g) : dc * c_prev;
    const T dlogf = df * f;
    dparam[0] -= dlogf * std::log(N / D);
    const T dN = dstate[BH] - p * dlogf / N;  // a_t = N - 1 also feeds the future
    const T dD = p * dlogf / D;
    const T ds = dN * (a_prev + step) + dD * (a_prev + T(1));
    if (!Coupled) dz[0] = dc * g * i * (T(1) - i);
    dz[kR * H] = -ds * r * s;
    dz[(kR + 1) * H] = dc * i * (T(1) - g * g);
    dz[(kR + 2) * H] = dh * tc * o * (T(1) - o);
    dstate[0] = dc * f;
    dstate[BH] = (dN + dD) * s;
  }
};

using PlstmCoupled = PowerLawCell<true>;
using PlstmSeparate = PowerLawCell<false>;

}  // namespace tsrnn
