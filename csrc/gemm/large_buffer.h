// at::empty for the CPU engine's large per-call buffers (h_all, state_all, the saved activations,
// dz, the input projection, dx), advised to be backed by transparent huge pages when they are
// fresh memory of their own.
//
// A buffer of at least glibc's largest mmap threshold (32 MB) is its own mapping, new at every
// call, and its first touch takes one page fault per 4 KB page: at T=200, B=128, H=128 a 52 MB
// output cost about 12 ms of faults on the 2-vCPU dev VM, as much as the GEMM that fills it
// (bench/RESULTS.md). madvise(MADV_HUGEPAGE) on such a buffer's 2 MB-aligned interior lets the
// kernel back it with 2 MB pages (THP "always" or "madvise"), one fault each; it is only advice:
// without THP, or where it fails, the buffer is an ordinary one. Smaller buffers come from the
// heap, reused without faults, and are left alone: advice there would outlive the buffer and
// change the pages of whatever the heap holds next. (torch's allocator advises every allocation
// with THP_MEM_ALLOC_ENABLE=1.)
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tsrnn {

inline at::Tensor empty_large(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor t = at::empty(sizes, options);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHugePage = uintptr_t{1} << 21;
  constexpr size_t kOwnMapping = size_t{32} << 20;
  if (t.nbytes() < kOwnMapping) return t;
  const uintptr_t start = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t begin = (start + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (start + t.nbytes()) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
  return t;
}

}  // namespace tsrnn
