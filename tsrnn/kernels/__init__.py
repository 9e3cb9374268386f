"""The Triton kernels and what the operators share about them: the paths "triton_step",
"triton_persistent" and "triton_scan" of tsrnn/backend.py, the kernels of the operators
``torch.ops.tsrnn_triton_step.*``, ``tsrnn_triton_persistent.*`` and ``tsrnn_triton_scan.*``
(tsrnn/ops.py imports them on first use), for CUDA tensors or CPU tensors under TRITON_INTERPRET=1.

- ``checks``: every operator's argument checks (the fake kernels in tsrnn/ops.py call them too);
- ``capacity``: what the persistent kernel holds (the dispatcher asks it; no triton import);
- ``cells``: the cell plug-in both recurrences share (LSTM, pLSTM coupled and separate, as in
  csrc/cells.h) and the drivers' host side: the rows of each step (padded, or packed sequences in
  torch's PackedSequence layout), the prologues, the final states and dW_hh;
- ``per_step``: the per-step fused recurrence (one launch per step: the h_{t-1} W_hh^T tile and
  the cell together; any H);
- ``persistent``: the persistent recurrence (one launch per sequence, the time loop and states on
  chip, W_hh held on chip or streamed);
- ``linear_scan``: the chunked linear scan x_t = a_t x_{t-1} + u_t (``tl.associative_scan``
  within a chunk, a carry between chunks).

The package imports nothing, and ``checks`` and ``capacity`` import no triton, so the dispatcher
and the operator schemas load without it. Imports point down: these modules import
``tsrnn.cells`` and each other, never the dispatcher or the operators.
"""
