// The precision of the recurrent products (W_hh h_{t-1} forward, W_hh^T dz_t backward) and of
// dW_hh's GEMM that a call asks for (tsrnn.precision.products, the operators' `precision`): kIeee
// exact in the math dtype, kTf32 operands rounded to TF32 (cvt.rna: 10 mantissa bits), kBf16
// operands rounded to bfloat16, each with float32 accumulation. Gate math, the states, dstate and
// dp are float32 (or float64) always. A kernel may compute more exactly than asked: the CPU and the
// cooperative CUDA kernels run kIeee whatever the call asks. Free of torch headers: the CUDA
// kernels include it.
#pragma once

namespace tsrnn {

enum class Products { kIeee, kTf32, kBf16 };

}  // namespace tsrnn
