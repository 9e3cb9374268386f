// Persistent fused recurrence on CUDA: one cooperative launch runs all T steps.
//
// Forward, step t: block k owns hidden units J_k (at most kMaxUnits) and holds their G rows of
// W_hh in shared memory. One warp per batch row b reads h_{t-1}[b, :] once (lanes stride over k)
// and accumulates z_g[u] = sum_k h_{t-1}[b,k] W_hh[gH+j0+u, k] for all its units u; after the
// shuffle reductions lane u adds xg[t,b,gH+j0+u], applies the cell (csrc/recurrence/cells.h) and writes
// h_t, the states and the saved activations of unit j0+u. h_{t-1} is exchanged through global
// memory (L2); a grid-wide sync separates the steps.
// Backward, step t (reverse), from dL/d(c, a)_{T-1} = grad_state_n: each block applies the
// cells' backward to its units (dz[t] from dL/dh_t, dL/dc_t, ...), a grid-wide sync, then one
// warp per batch row reads dz[t,b,:] once and forms dL/dh_{t-1}[b,k] = sum_r dz[t,b,r] W_hh[r,k]
// for the block's units k, with the block's columns of W_hh in shared memory.
// dW_hh = dz^T [h_0..h_{T-2}] is two cuBLAS GEMMs after the kernel (csrc/recurrence/op.h; one
// GEMM over the gathered rows of step t - 1 when packed).
// Packed sequences (recurrence.h): step t runs its rows(t) active rows only, in both directions;
// warps (and blocks) with no active row go straight to the step's barriers, which every block
// still reaches. The reverse sweep meets a row first at its last step: the row's dL/dh in the dh
// buffer is written only by the GEMVs of the steps that run it (steps after its last one do
// not), so it is still the zeros it came in with, as it must be (no later h depends on it); its
// dstate is still dL/dstate_n, and a row of no step passes dstate through and keeps dh = 0.
// Everything is float32. The host functions are templates on the cell (recurrence.h),
// instantiated at the end of this file.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "recurrence/cells.h"
#include "recurrence/cuda/device_common.h"
#include "recurrence/cuda/recurrence.h"

namespace tsrnn {
namespace cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// v[u] of lane u (u < kMaxUnits), with compile-time indices only (no local-memory array).
__device__ inline float pick(const float (&v)[kMaxUnits], int u) {
  float out = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxUnits; ++i) out = i == u ? v[i] : out;
  return out;
}

template <class C>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardArgs a, int units) {
  constexpr int G = C::kGates, S = C::kStates, K = C::kSaved;
  float* const w_s = dynamic_shared<float>();  // [G][units][H]: w_s[(g*units + u)*H + k] = W_hh[g*H + j0 + u, k]
  const int H = a.H, B = a.B;
  const long long BH = static_cast<long long>(B) * H;
  const int j0 = blockIdx.x * units;
  const int nj = min(units, H - j0);
  for (int idx = threadIdx.x; idx < G * nj * H; idx += blockDim.x) {
    const int g = idx / (nj * H), u = idx / H % nj, k = idx % H;
    w_s[(g * units + u) * H + k] = a.w_hh[static_cast<long long>(g * H + j0 + u) * H + k];
  }
  __syncthreads();
  cg::grid_group grid = cg::this_grid();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  long long prev_first = 0;  // the first packed row of step t - 1 (of h0 at t = 0)
  for (int t = 0; t < a.T; ++t) {
    const StepRows step = step_rows(a.offsets, t, B);
    // Row b < step.rows of h_{t-1}: the active rows of step t - 1 include those of step t.
    const float* h_prev = t == 0 ? a.h0 : a.h_all + prev_first * H;
    const float* prev = t == 0 ? a.state0 : a.state_all + (t - 1) * (S * BH);
    float* next = a.state_all + t * (S * BH);
    for (int b = warp; b < step.rows; b += kWarps) {  // a warp per active row, all of the block's units
      const int j = j0 + lane;  // the unit this lane applies the cell to, if lane < nj
      const long long n = b * static_cast<long long>(H) + j;  // of the [S, B, H] states
      const long long row = step.first + b;                   // of the packed (or [T, B]) rows
      float x[G], prev_l[S];  // loads that do not wait for h_{t-1}, issued before the dot products
      if (lane < nj) {
#pragma unroll
        for (int g = 0; g < G; ++g) x[g] = a.xg[row * G * H + g * H + j];
#pragma unroll
        for (int s = 0; s < S; ++s) prev_l[s] = prev[s * BH + n];
      }
      float z[G][kMaxUnits];
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int u = 0; u < kMaxUnits; ++u) z[g][u] = 0.f;
      const float* h_row = h_prev + b * static_cast<long long>(H);
      for (int k = lane; k < H; k += 32) {
        const float hk = __ldcg(h_row + k);  // written by other blocks: read through L2
#pragma unroll
        for (int u = 0; u < kMaxUnits; ++u) {
          if (u < nj) {
#pragma unroll
            for (int g = 0; g < G; ++g) z[g][u] += hk * w_s[(g * units + u) * H + k];
          }
        }
      }
      float zj[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int u = 0; u < kMaxUnits; ++u) {
          if (u < nj) z[g][u] = warp_sum(z[g][u]);
        }
        zj[g] = pick(z[g], lane);
      }
      if (lane >= nj) continue;
#pragma unroll
      for (int g = 0; g < G; ++g) zj[g] += x[g];
      float act[K], next_l[S];
      const float p = a.p ? a.p[j] : 0.f;
      const float dt = a.dt ? a.dt[row] : 1.f;
      // Unit strides: the cell reads and writes this lane's local copies.
      const float h = C::forward(zj, 1, act, prev_l, next_l, 1, 1, p, dt, a.eps);
#pragma unroll
      for (int s = 0; s < S; ++s) next[s * BH + n] = next_l[s];
      a.h_all[row * H + j] = h;
      if (a.saved) {
        float* saved = a.saved + row * K * H + j;
#pragma unroll
        for (int q = 0; q < K; ++q) saved[q * H] = act[q];
      }
    }
    prev_first = step.first;
    if (t + 1 < a.T) grid.sync();  // every block, with active rows or not
  }
}

template <class C>
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardArgs a, int units) {
  constexpr int G = C::kGates, S = C::kStates, K = C::kSaved;
  float* const w_s = dynamic_shared<float>();  // [units][G*H]: w_s[u*G*H + r] = W_hh[r, k0 + u]
  const int H = a.H, B = a.B, GH = G * a.H;
  const long long BH = static_cast<long long>(B) * H;
  const int k0 = blockIdx.x * units;
  const int nk = min(units, H - k0);
  for (int idx = threadIdx.x; idx < nk * GH; idx += blockDim.x) {
    const int u = idx % nk, r = idx / nk;
    w_s[u * GH + r] = a.w_hh[static_cast<long long>(r) * H + k0 + u];
  }
  __syncthreads();
  cg::grid_group grid = cg::this_grid();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int t = a.T - 1; t >= 0; --t) {
    const StepRows step = step_rows(a.offsets, t, B);
    const float* prev = t == 0 ? a.state0 : a.state_all + (t - 1) * (S * BH);
    const float* next = a.state_all + t * (S * BH);
    // The cells' backward for this block's units and the step's active rows: dz[t] and the
    // carried state gradients (a row's dh and dstate wait untouched until its last step).
    for (int idx = threadIdx.x; idx < step.rows * nk; idx += blockDim.x) {
      const int b = idx / nk, j = k0 + idx % nk;
      const long long n = b * static_cast<long long>(H) + j;  // of the [B, H] and [S, B, H] buffers
      const long long row = step.first + b;                   // of the packed (or [T, B]) rows
      const float dh = a.dh[n] + (a.grad_h ? a.grad_h[row * H + j] : 0.f);
      float act[K], prev_l[S], next_l[S], dstate[S], dz[G];
      const float* saved = a.saved + row * K * H + j;
#pragma unroll
      for (int q = 0; q < K; ++q) act[q] = saved[q * H];
#pragma unroll
      for (int s = 0; s < S; ++s) {
        prev_l[s] = prev[s * BH + n];
        next_l[s] = next[s * BH + n];
        dstate[s] = a.dstate[s * BH + n];
      }
      const float p = a.p ? a.p[j] : 0.f;
      const float dt = a.dt ? a.dt[row] : 1.f;
      float dp = 0.f;
      C::backward(act, prev_l, next_l, dh, dstate, dz, &dp, 1, 1, p, dt, a.eps);
#pragma unroll
      for (int s = 0; s < S; ++s) a.dstate[s * BH + n] = dstate[s];
      float* dz_row = a.dz + row * GH + j;
#pragma unroll
      for (int g = 0; g < G; ++g) dz_row[g * H] = dz[g];
      if (C::kHasP) a.dp[n] += dp;
    }
    grid.sync();  // dz[t] is complete (every block reaches it, with active rows or not)
    // dL/dh_{t-1} for this block's units, a warp per active row (dz[t, b] is read once); read by
    // this block only, in the next step's cells.
    for (int b = warp; b < step.rows; b += kWarps) {
      const float* dz_row = a.dz + (step.first + b) * GH;
      float acc[kMaxUnits];
#pragma unroll
      for (int u = 0; u < kMaxUnits; ++u) acc[u] = 0.f;
      for (int r = lane; r < GH; r += 32) {
        const float d = __ldcg(dz_row + r);
#pragma unroll
        for (int u = 0; u < kMaxUnits; ++u) {
          if (u < nk) acc[u] += d * w_s[u * GH + r];
        }
      }
#pragma unroll
      for (int u = 0; u < kMaxUnits; ++u) {
        if (u < nk) acc[u] = warp_sum(acc[u]);
      }
      const float dh = pick(acc, lane);
      if (lane < nk) a.dh[b * static_cast<long long>(H) + k0 + lane] = dh;
    }
    __syncthreads();
  }
}

// Lets `kernel` use up to `optin` bytes of dynamic shared memory (the same value for every shape,
// so concurrent plans cannot undo each other) and counts how many of its blocks using `bytes`
// fit on one multiprocessor. Both act on the current device.
template <typename Kernel>
cudaError_t resident_blocks(Kernel kernel, int optin, std::size_t bytes, int* per_sm) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  if (err != cudaSuccess) return err;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, kThreads, bytes);
}

// Cooperative launch of `kernel` with (args, units) as its parameters.
template <typename Args>
cudaError_t launch(void (*kernel)(Args, int), const Plan& plan, const Args& args, cudaStream_t stream) {
  if (plan.blocks < 1) return cudaErrorInvalidConfiguration;
  Args a = args;
  int units = plan.units;
  void* params[] = {&a, &units};
  return cudaLaunchCooperativeKernel(kernel, plan.blocks, kThreads, params, plan.shared_bytes, stream);
}

}  // namespace

template <class C>
cudaError_t plan(int hidden, Plan* out) {
  *out = Plan{};
  if (hidden < 1) return cudaErrorInvalidValue;
  int device = 0, sms = 0, cooperative = 0, optin = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (err != cudaSuccess || !cooperative) return err;
  const int units = static_cast<int>((static_cast<long long>(hidden) + sms - 1) / sms);
  const int blocks = (hidden + units - 1) / units;
  const std::size_t bytes = sizeof(float) * C::kGates * static_cast<std::size_t>(units) * hidden;
  if (units > kMaxUnits || bytes > static_cast<std::size_t>(optin)) return cudaSuccess;
  int forward_per_sm = 0, backward_per_sm = 0;
  err = resident_blocks(forward_kernel<C>, optin, bytes, &forward_per_sm);
  if (err == cudaSuccess) err = resident_blocks(backward_kernel<C>, optin, bytes, &backward_per_sm);
  if (err != cudaSuccess) return err;
  if (static_cast<long long>(std::min(forward_per_sm, backward_per_sm)) * sms < blocks) return cudaSuccess;
  *out = Plan{blocks, units, bytes};
  return cudaSuccess;
}

template <class C>
cudaError_t forward(const Plan& plan, const ForwardArgs& args, cudaStream_t stream) {
  return launch(forward_kernel<C>, plan, args, stream);
}

template <class C>
cudaError_t backward(const Plan& plan, const BackwardArgs& args, cudaStream_t stream) {
  return launch(backward_kernel<C>, plan, args, stream);
}

// The cells of csrc/recurrence/cells.h, the only instantiations (recurrence.h declares the templates).
#define TSRNN_INSTANTIATE(C)                                                                    \
  template cudaError_t plan<C>(int, Plan*);                                                     \
  template cudaError_t forward<C>(const Plan&, const ForwardArgs&, cudaStream_t);               \
  template cudaError_t backward<C>(const Plan&, const BackwardArgs&, cudaStream_t);
TSRNN_INSTANTIATE(LSTMCell)
TSRNN_INSTANTIATE(PowerLawCell<true>)
TSRNN_INSTANTIATE(PowerLawCell<false>)
#undef TSRNN_INSTANTIATE

}  // namespace cuda
}  // namespace tsrnn
