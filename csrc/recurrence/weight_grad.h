// What the recurrence operator (csrc/recurrence/op.h) derives from a backend's time loop, the same
// on every device: the recurrent weight gradient dW_hh (recurrent_weight_grad, through a backend's
// weight_gemm), the final states of padded or packed rows (final_states), and the ATen defaults a
// backend inherits for its large buffers and its weight GEMM (AtenBuffersAndGemm, round_to_tf32).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "recurrence/products.h"
#include "recurrence/steps.h"

namespace tsrnn {

using at::Tensor;

// x rounded to TF32 as cvt.rna.tf32.f32 rounds (to nearest, ties away from zero, 10 mantissa bits
// kept), still float32: adding half of the dropped part's range to the magnitude bits carries into
// the kept bits; Inf and NaN stay as they are.
inline Tensor round_to_tf32(const Tensor& x) {
  const Tensor bits = x.view(at::kInt);
  const Tensor rounded = at::bitwise_and(bits + 0x1000, static_cast<int64_t>(static_cast<int32_t>(0xffffe000u)));
  return at::where(at::isfinite(x), rounded.view(at::kFloat), x);
}

// What a backend takes from ATen unless it has its own: at::empty for the large per-call buffers
// (h_all, state_all, saved, dz) and ATen's GEMM for the weight gradient, out = a^T b (+ out if
// accumulate), a: [K, M], b: [K, N], out: [M, N], in the call's Products: tf32, the operands
// rounded to TF32 first (their products are exact in float32, so the result is a TF32 GEMM's
// whichever way torch's matmul flag is set: no flag is touched); bf16, bfloat16 operands and a
// bfloat16 GEMM (float32 accumulation); ieee, ATen's GEMM as the user's torch.backends flags say.
struct AtenBuffersAndGemm {
  static Tensor empty_large(at::IntArrayRef sizes, const at::TensorOptions& options) {
    return at::empty(sizes, options);
  }
  static void weight_gemm(const Tensor& out, const Tensor& a_in, const Tensor& b_in, bool accumulate,
                          Products products) {
    if (products == Products::kBf16) {
      const Tensor product = at::mm(a_in.t().to(at::kBFloat16), b_in.to(at::kBFloat16)).to(out.scalar_type());
      accumulate ? out.add_(product) : out.copy_(product);
      return;
    }
    const bool tf32 = products == Products::kTf32 && a_in.scalar_type() == at::kFloat;
    const Tensor a = tf32 ? round_to_tf32(a_in) : a_in, b = tf32 ? round_to_tf32(b_in) : b_in;
    if (accumulate) {
      out.addmm_(a.t(), b);
    } else {
      Tensor result = out;  // the same storage: mm_out takes a non-const reference
      at::mm_out(result, a.t(), b);
    }
  }
};

// dW_hh = sum_t dz[t]^T h_{t-1} through Backend::weight_gemm. Padded: dz[0]^T h0 + dz[1:]^T
// h_all[:-1], dz: [T, B, G*H], h0: [B, H], h_all: [T, B, H] (two GEMMs, no copy of the h's).
// Packed (dz: [N, G*H], h_all: [N, H]): step t's rows of dz meet the first rows(t) rows of step
// t-1 (of h0 at t = 0), gathered into one [N, H] operand of one GEMM.
template <typename Backend>
Tensor recurrent_weight_grad(const Tensor& dz, const Tensor& h0, const Tensor& h_all, const Steps& steps,
                             Products products) {
  const int64_t GH = dz.size(-1), H = h0.size(1);
  const Tensor grad = at::empty({GH, H}, dz.options());
  if (steps.packed) {
    const int64_t T = static_cast<int64_t>(steps.offsets.size()) - 1, B = h0.size(0);
    std::vector<int64_t> rows;  // of cat(h0, h_all)
    rows.reserve(steps.offsets[T]);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t base = t == 0 ? 0 : B + steps.first(t - 1);
      for (int64_t b = 0; b < steps.rows(t); ++b) rows.push_back(base + b);
    }
    const Tensor index = at::tensor(rows, at::kLong).to(h0.device());
    Backend::weight_gemm(grad, dz, at::cat({h0, h_all}).index_select(0, index), false, products);
    return grad;
  }
  const int64_t T = dz.size(0), B = dz.size(1);
  Backend::weight_gemm(grad, dz[0], h0, false, products);
  if (T > 1) {
    Backend::weight_gemm(grad, dz.narrow(0, 1, T - 1).view({(T - 1) * B, GH}),
                         h_all.narrow(0, 0, T - 1).view({(T - 1) * B, H}), true, products);
  }
  return grad;
}

// The final states [S, B, H]: row b's states after its last step, state_all[T-1] when padded.
inline Tensor final_states(const Tensor& state_all, const Tensor& state0, const Steps& steps) {
  const int64_t T = state_all.size(0), S = state_all.size(1), B = state_all.size(2), H = state_all.size(3);
  if (!steps.packed) return state_all[T - 1].clone();
  const int64_t live = steps.rows(0);  // the rows that run a step; the others keep state0
  std::vector<int64_t> rows(S * live);  // of state_all seen as [T*S*B, H]: (last(b)*S + s)*B + b
  int64_t b = 0;                        // rows [b, rows(t)) end at step t
  for (int64_t t = T - 1; t >= 0; --t) {
    for (; b < steps.rows(t); ++b) {
      for (int64_t s = 0; s < S; ++s) rows[s * live + b] = (t * S + s) * B + b;
    }
  }
  const Tensor index = at::tensor(rows, at::kLong).to(state_all.device());
  const Tensor ran = state_all.view({T * S * B, H}).index_select(0, index).view({S, live, H});
  return live == B ? ran : at::cat({ran, state0.narrow(1, live, B - live)}, 1);
}

}  // namespace tsrnn
