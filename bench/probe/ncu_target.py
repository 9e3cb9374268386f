"""The program bench/probe/ncu.py runs under Nsight Compute: ``calls`` forward+backward calls of one
tsrnn.LSTM layer on one path, at one shape and dtype, the path's plan choosing its configuration.

    python bench/probe/ncu_target.py PATH T B H DTYPE CALLS     (e.g. cuda_cluster 70 20 400 bfloat16 4)

ncu skips the launches of the first calls (warm-up) and profiles a later one. Prints nothing: ncu's
CSV goes to the same stdout.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # this tree's tsrnn

import torch  # noqa: E402

import tsrnn  # noqa: E402


def main(path: str, T: str, B: str, H: str, dtype: str, calls: str) -> None:
    T, B, H = int(T), int(B), int(H)
    torch.manual_seed(0)
    model = tsrnn.LSTM(H, H, backend=path).to("cuda", getattr(torch, dtype))
    x = torch.randn(T, B, H, device="cuda", dtype=getattr(torch, dtype))
    for _ in range(int(calls)):
        model(x)[0].float().sum().backward()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(*sys.argv[1:])
