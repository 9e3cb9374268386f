// The input projection of the CPU engine's layers and its backward, the largest GEMMs of a layer
// besides the time loop's:
//
//   forward:  xg = x W^T + b                 x: [M, I], W: [N, I], b: [N] or none -> [M, N]
//   backward: dx = dxg W, dW = dxg^T x, db = sum over rows of dxg (each only where asked for)
//
// float32 runs csrc/gemm/blocked_gemm.h's threaded GEMM on the time loops' kernel: each sum starts
// at b and adds the I products in order (torch.addmm's result within rounding), db comes from the
// same pass over dxg as dW, and xg and dx are large buffers on huge pages
// (csrc/gemm/large_buffer.h). Other dtypes, and CPUs or builds without a panel kernel, run ATen's
// GEMMs. Schemas, fake kernels and the autograd formula in tsrnn/ops/projection.py.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "gemm/blocked_gemm.h"
#include "gemm/large_buffer.h"
#include "check_message.h"

namespace tsrnn {
namespace {

using at::Tensor;

void check_projection(const Tensor& x, const Tensor& w) {
  TSRNN_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "tsrnn: cpu_projection takes x [M, I] and w [N, I], got ", x.sizes(), " and ", w.sizes());
}

Tensor cpu_projection(const Tensor& x, const Tensor& w, const c10::optional<Tensor>& bias) {
  check_projection(x, w);
  const Tensor b = bias ? bias->contiguous() : Tensor();
  TSRNN_CHECK(!bias || (b.dim() == 1 && b.size(0) == w.size(0)), "tsrnn: cpu_projection's bias must be [", w.size(0),
              "], got ", b.sizes());
  if (!runs_blocked(x.size(0), {x, w, b})) return bias ? at::addmm(b, x, w.t()) : at::mm(x, w.t());
  const Tensor xg = empty_large({x.size(0), w.size(0)}, x.options());
  blocked_gemm(xg, x, w.t(), bias ? b.data_ptr<float>() : nullptr, 0, nullptr);
  return xg;
}

std::tuple<Tensor, Tensor, Tensor> cpu_projection_backward(const Tensor& grad, const Tensor& x, const Tensor& w,
                                                           std::array<bool, 3> mask) {
  check_projection(x, w);
  TSRNN_CHECK(grad.dim() == 2 && grad.size(0) == x.size(0) && grad.size(1) == w.size(0),
              "tsrnn: cpu_projection_backward's grad must be [", x.size(0), ", ", w.size(0), "], got ", grad.sizes());
  const bool ours_dx = runs_blocked(grad.size(0), {grad, x, w}), ours_dw = runs_blocked(grad.size(1), {grad, x, w});
  Tensor dx = at::empty({0}, x.options()), dw = at::empty({0}, w.options()), db = at::empty({0}, grad.options());
  if (mask[0]) {
    if (ours_dx) {
      dx = empty_large({x.size(0), x.size(1)}, x.options());
      blocked_gemm(dx, grad, w, nullptr, 0, nullptr);
    } else {
      dx = at::mm(grad, w);
    }
  }
  if (mask[1] && ours_dw) {
    dw = at::empty({w.size(0), w.size(1)}, w.options());
    if (mask[2]) db = at::empty({w.size(0)}, grad.options());
    blocked_gemm(dw, grad.t(), x, nullptr, 0, mask[2] ? db.data_ptr<float>() : nullptr);
    return {dx, dw, db};
  }
  if (mask[1]) dw = at::mm(grad.t(), x);
  if (mask[2]) db = grad.sum(0);
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn, CPU, m) {
  m.impl("cpu_projection", &cpu_projection);
  m.impl("cpu_projection_backward", &cpu_projection_backward);
}

}  // namespace tsrnn
