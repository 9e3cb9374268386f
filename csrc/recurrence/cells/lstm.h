// (S1) The LSTM cell (tsrnn/ops/recurrence/cells/lstm.py), gates (i, f, g, o), state c:
//   i, f, g, o = σ(z_i), σ(z_f), tanh(z_g), σ(z_o)
//   c_t = f c_{t-1} + i g,   h_t = o tanh(c_t)
// No per-unit parameters, no step input, no constants.
//
// forward: z [kGates] stride zs (gate pre-activations), act [kSaved] stride H out (i, f, g, o),
// prev/next [kStates] stride BH (c_{t-1} in, c_t out); returns h_t.
// backward: act, prev, next as the forward left them; dh = dL/dh_t; dstate [kStates] stride BH,
// in dL/dc_t, out dL/dc_{t-1}; dz [kGates] stride H out (dL/dz).
#pragma once

#include "recurrence/cells/cell_math.h"

namespace tsrnn {

struct LSTMCell {
  static constexpr const char* kName = "lstm";
  static constexpr int kGates = 4, kStates = 1, kSaved = 4;
  static constexpr int kParams = 0, kConstants = 0;
  static constexpr bool kStepInput = false;

  template <typename T>
  TSRNN_HOST_DEVICE static inline T forward(const T* z, int64_t zs, T* act, const T* prev, T* next, int64_t H,
                                            int64_t /*BH*/, const T* /*param*/, T /*step*/,
                                            const T* /*constant*/) {
    const T i = sigmoid(z[0]), f = sigmoid(z[zs]), g = std::tanh(z[2 * zs]), o = sigmoid(z[3 * zs]);
    const T c = f * prev[0] + i * g;
    act[0] = i;
    act[H] = f;
    act[2 * H] = g;
    act[3 * H] = o;
    next[0] = c;
    return o * std::tanh(c);
  }

  template <typename T>
  TSRNN_HOST_DEVICE static inline void backward(const T* act, const T* prev, const T* next, T dh, T* dstate, T* dz,
                                                T* /*dparam*/, int64_t H, int64_t /*BH*/, const T* /*param*/,
                                                T /*step*/, const T* /*constant*/) {
    const T i = act[0], f = act[H], g = act[2 * H], o = act[3 * H];
    const T tc = std::tanh(next[0]);
    const T dc = dstate[0] + dh * o * (T(1) - tc * tc);
    dz[0] = dc * g * i * (T(1) - i);
    dz[H] = dc * prev[0] * f * (T(1) - f);
    dz[2 * H] = dc * i * (T(1) - g * g);
    dz[3 * H] = dh * tc * o * (T(1) - o);
    dstate[0] = dc * f;
  }
};

}  // namespace tsrnn
