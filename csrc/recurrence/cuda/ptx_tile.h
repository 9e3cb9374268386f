// The PTX of the tensor-core kernels' warp tiles (tensor_core.h), part of ptx.h's wrappers (ptx.h
// includes it; its top comment says how each is built and emulated): the shared::cta address of a
// pointer (cvta.to.shared), ldmatrix, cvt.rna.tf32, mma.sync (TF32, bf16) and the cp.async copies
// from global to shared memory with their commit and wait. Under TSRNN_SIMT each is the SIMT
// emulator's (tests/simt/ptx_emulation.h). Device code only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef TSRNN_SIMT
#include "ptx_emulation.h"
#endif

namespace tsrnn {
namespace cuda {
namespace ptx {

// cvta.to.shared: the 32-bit shared::cta address of a pointer into the block's shared memory.
__device__ inline std::uint32_t shared_address(const void* p, int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  return simt::ptx::shared_address(p, line);
#else
  (void)line;
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
#endif
}

// ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 (a warp collective; N = 1, 2 or 4 matrices of
// 8 x 8 16-bit elements): lane 8 i + r passes the address of row r of matrix i (16 bytes, 16-byte
// aligned; lanes past 8 N pass nothing that is read). Without .trans lane l gets in out[i] the two
// elements of row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1, of matrix i (the lower column in the
// lower half); with .trans the two elements of column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1.
template <int N, bool Trans = false>
__device__ inline void ldmatrix(std::uint32_t (&out)[N], const void* row, int line = __builtin_LINE()) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef TSRNN_SIMT
  simt::ptx::ldmatrix(out, N, Trans, row, line);
#else
  (void)line;
  const std::uint32_t address = shared_address(row);
  if constexpr (N == 1 && !Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(out[0]) : "r"(address) : "memory");
  } else if constexpr (N == 1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(out[0]) : "r"(address) : "memory");
  } else if constexpr (N == 2 && !Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(out[0]), "=r"(out[1]) : "r"(address) : "memory");
  } else if constexpr (N == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(out[0]), "=r"(out[1]) : "r"(address)
                 : "memory");
  } else if constexpr (!Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
                 : "r"(address)
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(out[0]), "=r"(out[1]), "=r"(out[2]), "=r"(out[3])
                 : "r"(address)
                 : "memory");
  }
#endif
}

// cvt.rna.tf32.f32: x rounded to TF32 (10 mantissa bits, to nearest, ties away from zero), as a
// float whose low 13 mantissa bits are zero; infinities and NaN pass.
__device__ inline float round_tf32(float x) {
#ifdef TSRNN_SIMT
  return simt::ptx::round_tf32(x);
#else
  std::uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
  return __uint_as_float(bits);
#endif
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (a warp collective): d = a b + c for A 16 x 8,
// B 8 x 8, C and D 16 x 8, with g = lane / 4 and t = lane % 4 (the PTX ISA's fragment layouts):
// a[i] is A(g + 8 (i % 2), t + 4 (i / 2)), b[i] is B(t + 4 i, g), c[i] and d[i] are
// C(g + 8 (i / 2), 2 t + i % 2). The operands are float bit patterns of which the hardware reads the
// TF32 bits (the low 13 mantissa bits ignored: round with cvt.rna first). d may be c.
__device__ inline void mma_tf32(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], const float (&c)[4],
                                int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::mma(d, a, b, c, false, line);
#else
  (void)line;
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%10, %11, %12, %13};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a b + c for A 16 x 16, B 16 x 8, each
// register two bf16 (element h of a fragment in register h / 2, the even h in the lower half):
// a's element h is A(g + 8 ((h / 2) % 2), 2 t + h % 2 + 8 (h / 4)), b's B(2 t + h % 2 + 8 (h / 2), g);
// c and d as mma_tf32's. d may be c.
__device__ inline void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], const float (&c)[4],
                                int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::mma(d, a, b, c, true, line);
#else
  (void)line;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%10, %11, %12, %13};"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// cp.async.{ca,cg}.shared.global [to], [from], Bytes, src-size: an asynchronous copy of Bytes (4, 8
// or 16; both addresses aligned to it) from global to this block's shared memory, or, with `read`
// false, Bytes of zeros (src-size 0: `from` is not read). Complete once the thread's
// cp_async_wait<N> leaves at most N later committed groups outstanding: until then `to` holds
// nothing a thread may read. 16-byte copies bypass L1 (.cg).
template <int Bytes>
__device__ inline void cp_async(void* to, const void* from, bool read = true, int line = __builtin_LINE()) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
#ifdef TSRNN_SIMT
  simt::ptx::cp_async(to, from, Bytes, read, line);
#else
  (void)line;
  const unsigned size = read ? Bytes : 0u;
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(to)), "l"(from), "r"(size) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(shared_address(to)), "l"(from), "n"(Bytes), "r"(size)
                 : "memory");
  }
#endif
}

// cp.async.commit_group: the thread's cp_async calls since the last commit become one group.
__device__ inline void cp_async_commit(int line = __builtin_LINE()) {
#ifdef TSRNN_SIMT
  simt::ptx::cp_async_commit(line);
#else
  (void)line;
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// cp.async.wait_group N: waits until at most the N most recent committed groups of the thread are
// outstanding (the others' data is in shared memory, visible to this thread; other threads see it
// after a barrier).
template <int N>
__device__ inline void cp_async_wait(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
#ifdef TSRNN_SIMT
  simt::ptx::cp_async_wait(N, file, line);
#else
  (void)line;
  (void)file;
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

}  // namespace ptx
}  // namespace cuda
}  // namespace tsrnn
