"""Triton kernels, installed as ``tsrnn.kernels`` (filled by the Triton issue)."""
