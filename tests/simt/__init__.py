"""The SIMT emulation of the CUDA kernels (see simt.h); test-only, not shipped."""
