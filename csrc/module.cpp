// The Python module tsrnn._C and the schemas of the torch.ops.tsrnn operators.
// Importing tsrnn._C registers the operators; their CPU kernels live in csrc/cpu/, their
// autograd formulas and shape functions in tsrnn/ops.py.
#include <Python.h>
#include <torch/library.h>

extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(tsrnn, m) {
  // xg: [T,B,G*H] input projection plus bias, w_hh: [G*H,H], h0: [B,H], state0: [S,B,H],
  // p: [H] (pLSTM), dt: [T,B] (pLSTM, optional). Returns h_all: [T,B,H], state_all: [T,S,B,H],
  // saved: [T,B,K*H] gate activations for backward ([0] when save is false).
  m.def(
      "recurrence_forward(str cell, Tensor xg, Tensor w_hh, Tensor h0, Tensor state0, "
      "Tensor? p, Tensor? dt, float eps, bool save) -> (Tensor, Tensor, Tensor)");
  // Returns grad_xg: [T,B,G*H], grad_w_hh: [G*H,H], grad_h0: [B,H], grad_state0: [S,B,H],
  // grad_p: [H] ([0] without p).
  m.def(
      "recurrence_backward(str cell, Tensor? grad_h, Tensor? grad_state, Tensor w_hh, Tensor h0, "
      "Tensor state0, Tensor h_all, Tensor state_all, Tensor saved, Tensor? p, Tensor? dt, "
      "float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  // a, u: [T,N], x0: [N]. Returns x: [T,N].
  m.def("linear_scan_forward(Tensor a, Tensor u, Tensor x0) -> Tensor");
  // Returns grad_a: [T,N], grad_u: [T,N], grad_x0: [N].
  m.def(
      "linear_scan_backward(Tensor grad_x, Tensor a, Tensor x, Tensor x0) -> (Tensor, Tensor, "
      "Tensor)");
}
