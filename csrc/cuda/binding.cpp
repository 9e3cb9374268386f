// Torch binding of the persistent CUDA recurrence (csrc/cuda/recurrence.cu): the CUDA kernels of
// torch.ops.tsrnn.recurrence_forward / recurrence_backward / recurrence_plan, whose schemas are in
// tsrnn/ops.py, and the Python module tsrnn._cuda that registers them when imported.
#include <Python.h>
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/recurrence.h"
#include "recurrence_op.h"

extern "C" {
PyObject* PyInit__cuda(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_cuda", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace tsrnn {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "tsrnn: ", what, " failed: ", cudaGetErrorString(err));
}

// The launch plan of Cell for w_hh [G*H, H] on its device (made current by the caller), cached
// per (device, H) for each cell; blocks == 0 where the kernel does not apply.
template <typename Cell>
cuda::Plan plan_for(const Tensor& w_hh) {
  const int64_t hidden = w_hh.size(1);
  if (w_hh.scalar_type() != at::kFloat || hidden < 1 || hidden > INT_MAX) return {};
  static std::mutex mutex;
  static std::map<std::pair<int, int64_t>, cuda::Plan> plans;
  const auto key = std::make_pair(static_cast<int>(w_hh.get_device()), hidden);
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found == plans.end()) {
    cuda::Plan plan;
    check_cuda(cuda::plan<Cell>(static_cast<int>(hidden), &plan), "planning the persistent CUDA kernel");
    found = plans.emplace(key, plan).first;
  }
  return found->second;
}

template <typename Cell>
cuda::Plan required_plan(const Tensor& w_hh, const Shapes& s) {
  TORCH_CHECK(s.T <= INT_MAX && s.B <= INT_MAX, "tsrnn: the CUDA kernels take at most ", INT_MAX,
              " steps and batch rows, got T=", s.T, ", B=", s.B);
  const cuda::Plan plan = plan_for<Cell>(w_hh);
  TORCH_CHECK(plan.blocks > 0, "tsrnn: the persistent CUDA kernel does not take H=", s.H,
              " on this GPU (W_hh does not fit in the shared memory of co-resident blocks); use "
              "backend='triton' or 'auto'");
  return plan;
}

void check_float(const Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, "tsrnn: the CUDA kernels take float32, got ", t.scalar_type(),
              " (tsrnn.functional runs bf16/fp16 layers in float32)");
}

// Exact float32 cuBLAS for dW_hh, like the kernels, even where the user allowed TF32; restores
// the setting on exit.
class NoTF32 {
 public:
  NoTF32() : before_(at::globalContext().allowTF32CuBLAS()) { at::globalContext().setAllowTF32CuBLAS(false); }
  ~NoTF32() { at::globalContext().setAllowTF32CuBLAS(before_); }

 private:
  bool before_;
};

template <typename T>
T* data_or_null(const c10::optional<Tensor>& t) {
  return t ? t->data_ptr<T>() : nullptr;
}

int64_t recurrence_plan(const std::string& cell, const Tensor& w_hh) {
  TORCH_CHECK(w_hh.dim() == 2 && w_hh.is_cuda(), "tsrnn: recurrence_plan takes a 2-D CUDA w_hh, got ",
              w_hh.sizes(), " on ", w_hh.device());
  const c10::cuda::CUDAGuard guard(w_hh.device());
  int64_t blocks = 0;
  dispatch_cell(cell, [&](auto tag) { blocks = plan_for<decltype(tag)>(w_hh).blocks; });
  return blocks;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> recurrence_forward(
    const std::string& cell, const Tensor& xg_in, const Tensor& w_hh_in, const Tensor& h0_in,
    const Tensor& state0_in, const c10::optional<Tensor>& p_in, const c10::optional<Tensor>& dt_in,
    double eps, bool save) {
  check_float(xg_in);
  const Tensor xg = xg_in.contiguous(), w_hh = w_hh_in.contiguous(), h0 = h0_in.contiguous(),
               state0 = state0_in.contiguous();
  c10::optional<Tensor> p, dt;
  if (p_in) p = p_in->contiguous();
  if (dt_in) dt = dt_in->contiguous();
  const c10::cuda::CUDAGuard guard(xg.device());
  Tensor h_all, state_n, state_all, saved;
  dispatch_cell(cell, [&](auto tag) {
    using Cell = decltype(tag);
    const Shapes s = check_inputs<Cell>(xg, w_hh, h0, state0, p, dt);
    const cuda::Plan plan = required_plan<Cell>(w_hh, s);
    h_all = at::empty({s.T, s.B, s.H}, xg.options());
    state_all = at::empty({s.T, Cell::kStates, s.B, s.H}, xg.options());
    saved = at::empty(save ? at::IntArrayRef({s.T, s.B, Cell::kSaved * s.H}) : at::IntArrayRef({0}), xg.options());
    const cuda::ForwardArgs args{xg.data_ptr<float>(), w_hh.data_ptr<float>(), h0.data_ptr<float>(),
                                 state0.data_ptr<float>(), data_or_null<float>(p), data_or_null<float>(dt),
                                 h_all.data_ptr<float>(), state_all.data_ptr<float>(),
                                 save ? saved.data_ptr<float>() : nullptr,
                                 static_cast<int>(s.T), static_cast<int>(s.B), static_cast<int>(s.H),
                                 static_cast<float>(eps)};
    check_cuda(cuda::forward<Cell>(plan, args, c10::cuda::getCurrentCUDAStream()),
               "launching the persistent forward kernel");
    state_n = state_all[s.T - 1].clone();
  });
  return {h_all, state_n, state_all, saved};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> recurrence_backward(
    const std::string& cell, const c10::optional<Tensor>& grad_h_in,
    const c10::optional<Tensor>& grad_state_n, const Tensor& w_hh_in, const Tensor& h0_in,
    const Tensor& state0_in, const Tensor& h_all_in, const Tensor& state_all_in,
    const Tensor& saved_in, const c10::optional<Tensor>& p_in, const c10::optional<Tensor>& dt_in,
    double eps) {
  check_float(h_all_in);
  const Tensor w_hh = w_hh_in.contiguous(), h0 = h0_in.contiguous(), state0 = state0_in.contiguous(),
               h_all = h_all_in.contiguous(), state_all = state_all_in.contiguous(),
               saved = saved_in.contiguous();
  c10::optional<Tensor> p, dt, grad_h;
  if (p_in) p = p_in->contiguous();
  if (dt_in) dt = dt_in->contiguous();
  if (grad_h_in) grad_h = grad_h_in->contiguous();
  const c10::cuda::CUDAGuard guard(h_all.device());
  Tensor dz, grad_w, dh, dstate, grad_p;
  dispatch_cell(cell, [&](auto tag) {
    using Cell = decltype(tag);
    const Shapes s = check_backward_inputs<Cell>(grad_h, grad_state_n, w_hh, h0, state0, h_all, state_all,
                                                 saved, p, dt);
    const cuda::Plan plan = required_plan<Cell>(w_hh, s);
    dz = at::empty({s.T, s.B, Cell::kGates * s.H}, h_all.options());
    dh = at::zeros({s.B, s.H}, h_all.options());
    dstate = grad_state_n ? grad_state_n->clone(at::MemoryFormat::Contiguous)
                          : at::zeros({Cell::kStates, s.B, s.H}, h_all.options());
    Tensor dp = p ? at::zeros({s.B, s.H}, h_all.options()) : Tensor();
    const cuda::BackwardArgs args{data_or_null<float>(grad_h), w_hh.data_ptr<float>(), state0.data_ptr<float>(),
                                  state_all.data_ptr<float>(), saved.data_ptr<float>(), data_or_null<float>(p),
                                  data_or_null<float>(dt), dz.data_ptr<float>(), dh.data_ptr<float>(),
                                  dstate.data_ptr<float>(), dp.defined() ? dp.data_ptr<float>() : nullptr,
                                  static_cast<int>(s.T), static_cast<int>(s.B), static_cast<int>(s.H),
                                  static_cast<float>(eps)};
    check_cuda(cuda::backward<Cell>(plan, args, c10::cuda::getCurrentCUDAStream()),
               "launching the persistent backward kernel");
    const NoTF32 exact;
    grad_w = recurrent_weight_grad(dz, h0, h_all);
    grad_p = p ? dp.sum(0) : at::empty({0}, h_all.options());
  });
  return {dz, grad_w, dh, dstate, grad_p};
}

}  // namespace

TORCH_LIBRARY_IMPL(tsrnn, CUDA, m) {
  m.impl("recurrence_forward", &recurrence_forward);
  m.impl("recurrence_backward", &recurrence_backward);
  m.impl("recurrence_plan", &recurrence_plan);
}

}  // namespace tsrnn
