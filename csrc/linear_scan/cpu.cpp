// Linear recurrence x_t = a_t x_{t-1} + u_t on the CPU, elementwise over N channels.
// Each OpenMP task owns a contiguous range of channels and walks it through time, so the
// inner loop is contiguous and vectorizes. Backward is the reverse scan
//   g_t = dL/dx_t + a_{t+1} g_{t+1},  grad_u_t = g_t,  grad_a_t = x_{t-1} g_t,  grad_x0 = a_0 g_0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <tuple>
#include "check_message.h"

namespace tsrnn {
namespace {

using at::Tensor;

constexpr int64_t kGrain = 4096;  // channels per OpenMP task

void check_scan(const Tensor& a, const Tensor& u, const Tensor& x0) {
  TSRNN_CHECK(u.dim() == 2 && u.size(0) >= 1, "tsrnn: linear_scan u must be [T, N] with T >= 1, got ",
              u.sizes());
  TSRNN_CHECK(a.sizes() == u.sizes(), "tsrnn: linear_scan a must match u ", u.sizes(), ", got ",
              a.sizes());
  TSRNN_CHECK(x0.dim() == 1 && x0.size(0) == u.size(1), "tsrnn: linear_scan x0 must be [",
              u.size(1), "], got ", x0.sizes());
  for (const Tensor* t : {&a, &u, &x0}) {
    TSRNN_CHECK(t->device().is_cpu(), "tsrnn: linear_scan takes CPU tensors, got ", t->device());
    TSRNN_CHECK(t->scalar_type() == u.scalar_type(), "tsrnn: linear_scan dtypes differ: ",
                t->scalar_type(), " vs ", u.scalar_type());
  }
  TSRNN_CHECK(u.scalar_type() == at::kFloat || u.scalar_type() == at::kDouble,
              "tsrnn: linear_scan takes float32 or float64, got ", u.scalar_type());
}

Tensor linear_scan_forward(const Tensor& a_in, const Tensor& u_in, const Tensor& x0_in) {
  check_scan(a_in, u_in, x0_in);
  const Tensor a = a_in.contiguous(), u = u_in.contiguous(), x0 = x0_in.contiguous();
  Tensor x = at::empty_like(u);
  const int64_t T = u.size(0), N = u.size(1);
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "tsrnn_linear_scan_forward", [&] {
    const scalar_t *pa = a.data_ptr<scalar_t>(), *pu = u.data_ptr<scalar_t>();
    const scalar_t* px0 = x0.data_ptr<scalar_t>();
    scalar_t* px = x.data_ptr<scalar_t>();
    at::parallel_for(0, N, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t t = 0; t < T; ++t) {
        const scalar_t* prev = t == 0 ? px0 : px + (t - 1) * N;
        for (int64_t n = begin; n < end; ++n) px[t * N + n] = pa[t * N + n] * prev[n] + pu[t * N + n];
      }
    });
  });
  return x;
}

std::tuple<Tensor, Tensor, Tensor> linear_scan_backward(const Tensor& grad_x_in,
                                                        const Tensor& a_in, const Tensor& x_in,
                                                        const Tensor& x0_in) {
  check_scan(a_in, x_in, x0_in);
  TSRNN_CHECK(grad_x_in.sizes() == x_in.sizes() && grad_x_in.scalar_type() == x_in.scalar_type(),
              "tsrnn: linear_scan grad_x must match x");
  const Tensor g_out = grad_x_in.contiguous(), a = a_in.contiguous(), x = x_in.contiguous(),
               x0 = x0_in.contiguous();
  const int64_t T = x.size(0), N = x.size(1);
  Tensor grad_a = at::empty_like(x), grad_u = at::empty_like(x), grad_x0 = at::empty_like(x0);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "tsrnn_linear_scan_backward", [&] {
    const scalar_t *pg = g_out.data_ptr<scalar_t>(), *pa = a.data_ptr<scalar_t>();
    const scalar_t *px = x.data_ptr<scalar_t>(), *px0 = x0.data_ptr<scalar_t>();
    scalar_t *ga = grad_a.data_ptr<scalar_t>(), *gu = grad_u.data_ptr<scalar_t>();
    scalar_t* gx0 = grad_x0.data_ptr<scalar_t>();
    at::parallel_for(0, N, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t t = T - 1; t >= 0; --t) {
        const scalar_t* x_prev = t == 0 ? px0 : px + (t - 1) * N;
        for (int64_t n = begin; n < end; ++n) {
          const scalar_t carry = t + 1 < T ? pa[(t + 1) * N + n] * gu[(t + 1) * N + n] : scalar_t(0);
          const scalar_t g = pg[t * N + n] + carry;
          gu[t * N + n] = g;
          ga[t * N + n] = g * x_prev[n];
        }
      }
      for (int64_t n = begin; n < end; ++n) gx0[n] = pa[n] * gu[n];
    });
  });
  return {grad_a, grad_u, grad_x0};
}

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn, CPU, m) {
  m.impl("linear_scan_forward", &linear_scan_forward);
  m.impl("linear_scan_backward", &linear_scan_backward);
}

}  // namespace tsrnn
