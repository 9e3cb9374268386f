// Pointwise parts of the recurrent cells: one hidden unit j of batch row b at one step.
// Shared by the CPU kernels (csrc/recurrence/cpu/recurrence.cpp) and the CUDA kernels
// (csrc/recurrence/cuda/cluster_recurrence.cu, grid_recurrence.cu): every function is __host__
// __device__ under nvcc.
//
// The time loop and the recurrent GEMM live in the drivers (cpu/recurrence.cpp, the CUDA kernels),
// the weight-gradient GEMMs in recurrence_op.h; a cell only maps gate pre-activations and previous states to new states (forward) and
// the reverse (backward). A cell declares:
//   kGates  rows of W per unit (gate pre-activations z, stride zs between gates)
//   kStates states carried besides h (stride BH between states: c, then a for pLSTM)
//   kSaved  activations saved per unit for backward (stride H, also the stride of dz)
//   kHasP   whether the cell has a per-unit decay exponent p (and accumulates dL/dp)
// and two static functions, forward() returning h_t and backward() writing dz.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define TSRNN_HOST_DEVICE __host__ __device__
#else
#define TSRNN_HOST_DEVICE
#endif

namespace tsrnn {

template <typename T>
TSRNN_HOST_DEVICE inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// (S1) i, f, g, o = σ(z_i), σ(z_f), tanh(z_g), σ(z_o); c = f c' + i g; h = o tanh(c).
struct LSTMCell {
  static constexpr int kGates = 4, kStates = 1, kSaved = 4;
  static constexpr bool kHasP = false;

  // z: [4] stride zs, act: [4] stride H (i, f, g, o), prev/next: [1] stride BH (c).
  template <typename T>
  TSRNN_HOST_DEVICE static inline T forward(const T* z, int64_t zs, T* act, const T* prev, T* next, int64_t H,
                          int64_t /*BH*/, T /*p*/, T /*dt*/, T /*eps*/) {
    const T i = sigmoid(z[0]), f = sigmoid(z[zs]), g = std::tanh(z[2 * zs]), o = sigmoid(z[3 * zs]);
    const T c = f * prev[0] + i * g;
    act[0] = i;
    act[H] = f;
    act[2 * H] = g;
    act[3 * H] = o;
    next[0] = c;
    return o * std::tanh(c);
  }

  // dstate: [1] stride BH, in: dL/dc_t (from the future), out: dL/dc_{t-1}. dz: [4] stride H.
  template <typename T>
  TSRNN_HOST_DEVICE static inline void backward(const T* act, const T* prev, const T* next, T dh, T* dstate, T* dz,
                              T* /*dp*/, int64_t H, int64_t /*BH*/, T /*p*/, T /*dt*/, T /*eps*/) {
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

// (S9) pLSTM in age form. Gates: coupled (r, g, o) with i = 1 - f, separate (i, r, g, o).
//   a_t = (1 - r)(a' + Δt),  f = ((a_t + 1) / ((1 - r)(a' + 1) + ε))^{-p}
//   c_t = f c' + i tanh(z_g),  h_t = σ(z_o) tanh(c_t).      States: (c, a).
template <bool Coupled>
struct PowerLawCell {
  static constexpr int kGates = Coupled ? 3 : 4, kStates = 2, kSaved = Coupled ? 4 : 5;
  static constexpr bool kHasP = true;
  static constexpr int kR = Coupled ? 0 : 1;  // gate row of r; g and o follow it

  // z: [kGates] stride zs, act: (f, r, g, o[, i]) stride H, prev/next: (c, a) stride BH.
  template <typename T>
  TSRNN_HOST_DEVICE static inline T forward(const T* z, int64_t zs, T* act, const T* prev, T* next, int64_t H,
                          int64_t BH, T p, T dt, T eps) {
    const T r = sigmoid(z[kR * zs]), g = std::tanh(z[(kR + 1) * zs]), o = sigmoid(z[(kR + 2) * zs]);
    const T s = T(1) - r, a_prev = prev[BH];
    const T a = s * (a_prev + dt);
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

  // dstate: (dc, da) stride BH, in: w.r.t. step t, out: w.r.t. step t-1. dp: this unit's dL/dp
  // accumulator; p: this unit's decay exponent, dt: the step length, eps: ε. With N = a_t + 1, D = (1 - r)(a' + 1) + ε: log f = -p (log N - log D).
  template <typename T>
  TSRNN_HOST_DEVICE static inline void backward(const T* act, const T* prev, const T* next, T dh, T* dstate, T* dz,
                              T* dp, int64_t H, int64_t BH, T p, T dt, T eps) {
    const T f = act[0], r = act[H], g = act[2 * H], o = act[3 * H];
    const T i = Coupled ? T(1) - f : act[4 * H];
    const T c_prev = prev[0], a_prev = prev[BH];
    const T s = T(1) - r;
    const T N = next[BH] + T(1), D = s * (a_prev + T(1)) + eps;
    const T tc = std::tanh(next[0]);
    const T dc = dstate[0] + dh * o * (T(1) - tc * tc);
    const T df = Coupled ? dc * (c_prev - g) : dc * c_prev;
    const T dlogf = df * f;
    *dp -= dlogf * std::log(N / D);
    const T dN = dstate[BH] - p * dlogf / N;  // a_t = N - 1 also feeds the future
    const T dD = p * dlogf / D;
    const T ds = dN * (a_prev + dt) + dD * (a_prev + T(1));
    if (!Coupled) dz[0] = dc * g * i * (T(1) - i);
    dz[kR * H] = -ds * r * s;
    dz[(kR + 1) * H] = dc * i * (T(1) - g * g);
    dz[(kR + 2) * H] = dh * tc * o * (T(1) - o);
    dstate[0] = dc * f;
    dstate[BH] = (dN + dD) * s;
  }
};

}  // namespace tsrnn
