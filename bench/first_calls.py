"""The first calls of backend="auto" on the CPU: a pLSTM (tsrnn.PowerLawLSTM(64, 64)) at T=35,
forward + backward, one thread.

(a) In a warm process, the first call with B=19 after warm calls with B=20, as a ratio to a warm
    call with B=20 (the shape class holds B=19: no verification, no timing).
(b) In a fresh process whose disk cache is warm (an earlier process ran the shape), its first call
    as a ratio to its second.

Each figure is the median over --repeats fresh processes, each with a disk cache of its own
(TSRNN_CACHE_DIR in a temporary folder). Run: python bench/first_calls.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ONE = """
import json, sys, time, torch, tsrnn
torch.set_num_threads(1)
torch.manual_seed(0)
model = tsrnn.PowerLawLSTM(64, 64)

def call(batch):
    x = torch.randn(35, batch, 64)
    start = time.perf_counter()
    model(x)[0].sum().backward()
    return time.perf_counter() - start

if sys.argv[1] == "a":
    for _ in range(5):
        call(20)
    warm = min(call(20) for _ in range(5))
    print(json.dumps({"ratio": call(19) / warm}))
else:
    first = call(20)
    print(json.dumps({"ratio": first / call(20)}))
"""


def run(mode: str, cache: Path) -> float:
    env = {**os.environ, "TSRNN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    for name in ("TSRNN_BACKEND", "TSRNN_AUTOTUNE", "TSRNN_VERIFY"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", ONE, mode], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)["ratio"]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    a, b = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as folder:
            a.append(run("a", Path(folder)))  # also warms this folder's cache for (b)
            b.append(run("b", Path(folder)))
    print(f"CPU: {cpu_model()}; one thread; pLSTM 64x64, T=35, forward+backward; {args.repeats} processes each")
    print(f"(a) first call of B=19 after warm B=20 calls / warm call: median {statistics.median(a):.2f}x "
          f"(runs: {', '.join(f'{r:.2f}' for r in a)})")
    print(f"(b) fresh process, warm disk cache, first call / second call: median {statistics.median(b):.2f}x "
          f"(runs: {', '.join(f'{r:.2f}' for r in b)})")


if __name__ == "__main__":
    main()
