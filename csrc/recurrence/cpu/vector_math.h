// Vectorized transcendental functions for the cells' pointwise loops.
//
// GCC vectorizes a loop that calls expf/tanhf/logf/powf only if it knows a SIMD variant exists.
// glibc's libmvec provides them on x86-64 but declares them only under -ffast-math, which would
// also drop NaN/Inf semantics; declaring them here keeps IEEE semantics (we build with
// -fno-math-errno only). TSRNN_CLONES compiles a function for AVX2+FMA and for baseline x86-64
// and picks one at load time, so the extension still runs on CPUs without AVX2.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define TSRNN_LIBMVEC 1
#define TSRNN_SIMD_DECL __attribute__((simd("notinbranch")))
extern "C" {
TSRNN_SIMD_DECL float expf(float) noexcept;
TSRNN_SIMD_DECL float tanhf(float) noexcept;
TSRNN_SIMD_DECL float logf(float) noexcept;
TSRNN_SIMD_DECL float powf(float, float) noexcept;
TSRNN_SIMD_DECL double exp(double) noexcept;
TSRNN_SIMD_DECL double tanh(double) noexcept;
TSRNN_SIMD_DECL double log(double) noexcept;
TSRNN_SIMD_DECL double pow(double, double) noexcept;
}
#define TSRNN_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TSRNN_CLONES
#endif
