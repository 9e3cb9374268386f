// The Python module tsrnn._C. Importing it registers the CPU kernels of the torch.ops.tsrnn
// operators (csrc/recurrence/cpu, csrc/linear_scan, csrc/gemm); their schemas, autograd formulas and shape
// functions live in tsrnn/ops/ (each op's op.py).
#include <Python.h>

extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}
