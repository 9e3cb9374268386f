"""The benches' clock: the median time of a call on a device (CUDA events on a GPU)."""
from __future__ import annotations

import statistics
import time

# Seconds of timed calls per model and shape, after its warm-up: a slow path (the reference loop at
# T = 1000) is timed fewer than ``repeats`` times rather than eating the run.
MODEL_BUDGET = 1.0


def timer(device):
    """A function timing ``fn`` on ``device`` (torch is imported here: the GPU report's parent process
    imports this module and leaves torch to its jobs)."""
    import torch

    def measure(fn, repeats: int) -> float:
        """Median milliseconds of fn() after two warm-up calls: ``repeats`` calls, or as many as
        MODEL_BUDGET seconds hold (at least one)."""
        fn(), fn()
        times, started = [], time.perf_counter()
        while len(times) < repeats and (not times or time.perf_counter() - started < MODEL_BUDGET):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return measure
