// JANET (tsrnn/ops/recurrence/cells/janet.py), the forget-gate-only LSTM, gates (f, g), state c:
//   f = σ(z_f),  i = 1 - σ(z_f - β),  g = tanh(z_g)
//   c_t = f c_{t-1} + i g,   h_t = c_t
// No per-unit parameters, no step input; one constant, β (constant[0]).
//
// forward: z [kGates] stride zs, act [kSaved] stride H out (f, i, g), prev/next [kStates] stride BH
// (c_{t-1} in, c_t out); returns h_t = c_t.
// backward: dh = dL/dh_t; dstate in dL/dc_t, out dL/dc_{t-1}; dz [kGates] stride H out:
//   dc = dstate + dh,  dz_f = dc (c' f (1 - f) - g i (1 - i)),  dz_g = dc i (1 - g²),  dc' = dc f.
#pragma once

#include "recurrence/cells/cell_math.h"

namespace tsrnn {

struct JanetCell {
  static constexpr const char* kName = "janet";
  static constexpr int kGates = 2, kStates = 1, kSaved = 3;
  static constexpr int kParams = 0, kConstants = 1;
  static constexpr bool kStepInput = false;

  template <typename T>
  TSRNN_HOST_DEVICE static inline T forward(const T* z, int64_t zs, T* act, const T* prev, T* next, int64_t H,
                                            int64_t /*BH*/, const T* /*param*/, T /*step*/, const T* constant) {
    const T f = sigmoid(z[0]), i = T(1) - sigmoid(z[0] - constant[0]), g = std::tanh(z[zs]);
    const T c = f * prev[0] + i * g;
    act[0] = f;
    act[H] = i;
    act[2 * H] = g;
    next[0] = c;
    return c;
  }

  template <typename T>
  TSRNN_HOST_DEVICE static inline void backward(const T* act, const T* prev, const T* /*next*/, T dh, T* dstate,
                                                T* dz, T* /*dparam*/, int64_t H, int64_t /*BH*/,
                                                const T* /*param*/, T /*step*/, const T* /*constant*/) {
    const T f = act[0], i = act[H], g = act[2 * H];
    const T dc = dstate[0] + dh;
    dz[0] = dc * (prev[0] * f * (T(1) - f) - g * i * (T(1) - i));
    dz[H] = dc * i * (T(1) - g * g);
    dstate[0] = dc * f;
  }
};

}  // namespace tsrnn
