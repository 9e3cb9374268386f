"""Triton kernels, installed as ``tsrnn.kernels`` (setup.py maps kernels/ there): the paths
"triton_step", "triton_persistent" and "triton_scan" of tsrnn/backend.py, the kernels of the
operators ``torch.ops.tsrnn_triton_step.*``, ``tsrnn_triton_persistent.*`` and
``tsrnn_triton_scan.*`` (tsrnn/ops.py imports them on first use), for CUDA tensors or CPU tensors
under TRITON_INTERPRET=1. ``per_step`` holds the per-step fused recurrence (one launch per step:
the h_{t-1} W_hh^T tile and the cell together; any H); ``persistent`` the persistent recurrence
(one launch per sequence, the time loop and states on chip, W_hh held on chip or streamed);
``linear_scan`` the chunked linear scan x_t = a_t x_{t-1} + u_t (``tl.associative_scan`` within a
chunk, a carry between chunks); and ``cells`` the cell plug-in both recurrences share (LSTM,
pLSTM coupled and separate, as in csrc/cells.h). The package itself imports nothing, so
importing it does not need triton.
"""
