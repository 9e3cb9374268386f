"""What ``pytest bench/`` answers first: how fast is each tsrnn cell, on the path it picks, against
torch.nn.LSTM and against the PyTorch step loop a user would otherwise write?

    pytest bench/                      # this summary (about a minute on 2 cores); the tables: -m detail
    python bench/speed_summary.py --rounds 31

For each cell (LSTM, MTS-LSTM, pLSTM, TILT) and device (the CPU, and CUDA where a GPU is visible),
one training step (forward, then backward of the output's sum through every parameter and the
input) of three modules, timed in interleaved rounds (``tsrnn.lab.speed``):
- tsrnn: the module on ``backend="auto"``, the path a user gets;
- torch.nn.LSTM: the same sizes in torch's LSTM (for the MTS-LSTM loaded with its effective biases:
  the same function); none for TILT, which is not an LSTM;
- step loop: the same module on ``backend="reference"``, the plain PyTorch loop over time steps
  (``tsrnn.reference``), what the cell costs without tsrnn.
Each tsrnn module is checked against its step loop before it is timed. Ratios are time over time
(below 1: tsrnn is faster), medians of the per-round ratios with their 95% interval; when the rounds
disagree (a noisy or throttled machine) the summary says so instead of printing numbers that look
exact.
"""
from __future__ import annotations

import argparse
import copy
from typing import Callable, NamedTuple

import torch

import tsrnn
from tsrnn.backend import choice
from tsrnn.lab import selftest, speed

T, B, H = 70, 20, 256  # the AWD-LSTM's bptt and batch, H = I
TILT_SHAPE = (500, 32, 30)  # T, B, D: seed 004's B and D, a quarter of its T
# seed 004's 8 τ* (growth c = 0.1: 1 to 1.1^7) and k = 4, as bench/test_tilt.py. The default 30 τ*
# over [1, 50] at B = 32 took between 20 and 48 ms per call on a quiet machine (its rounds spread
# 1.9-2.5x: allocation-bound, not noise this summary should blame on the machine).
TILT_ARGS = {"n_taus": 8, "tau_min": 1.0, "tau_max": 1.1 ** 7, "k": 4}
ROUNDS = 21


class Cell(NamedTuple):
    name: str
    modules: Callable[[torch.device], dict[str, Callable[[], object]]]  # {role: one training step}
    path: str | None = None  # the path where "auto" is not the backend dispatcher's (TILT's method)


def _step(module, x, **kwargs) -> Callable[[], object]:
    def run():
        out = module(x, **kwargs)[0]
        out.sum().backward()
    return run


def _checked(ours, loop, x, **kwargs) -> None:
    with torch.no_grad():
        out, ref = ours(x, **kwargs)[0], loop(x, **kwargs)[0]
    err = ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
    assert err < 1e-4, f"{type(ours).__name__} disagrees with its step loop before timing: relative error {err:.1e}"


def _recurrent(make: Callable[[], torch.nn.Module], same_function: bool, with_dt: bool):
    """The three modules of a recurrent cell: ``make()`` on auto, a torch.nn.LSTM (loaded with the
    cell's state dict where ``same_function``: an MTS-LSTM's effective biases) and the step loop."""
    def modules(device):
        torch.manual_seed(0)
        ours = make().to(device)
        loop = copy.deepcopy(ours)
        loop.backend = "reference"
        theirs = torch.nn.LSTM(H, H).to(device)
        if same_function:
            theirs.load_state_dict(ours.to_torch().state_dict())
        x = torch.randn(T, B, H, device=device, requires_grad=True)
        kwargs = {"dt": torch.rand(T, B, device=device) + 0.5} if with_dt else {}
        _checked(ours, loop, x, **kwargs)
        return {"tsrnn": _step(ours, x, **kwargs), "torch.nn.LSTM": _step(theirs, x), "step loop": _step(loop, x, **kwargs)}
    return modules


def _tilt(device):
    torch.manual_seed(0)
    ours = tsrnn.TILT(**TILT_ARGS).to(device)
    x = torch.randn(*TILT_SHAPE, device=device, requires_grad=True)

    def loop(u):
        return tsrnn.reference.tilt(u, ours.n_taus, ours.tau_min, ours.tau_max, ours.k, ours.g, ours.dt, ours.integrate)

    _checked(ours, loop, x)
    return {"tsrnn": _step(ours, x), "step loop": _step(loop, x)}


CELLS = [
    Cell("LSTM", _recurrent(lambda: tsrnn.LSTM(H, H), same_function=True, with_dt=False)),
    Cell("MTS-LSTM", _recurrent(lambda: tsrnn.LSTM(H, H, timescales=[tsrnn.memory.timescales.inverse_gamma_quantiles(H, 0.56)]),
                                same_function=True, with_dt=False)),
    Cell("pLSTM", _recurrent(lambda: tsrnn.PowerLawLSTM(H, H), same_function=False, with_dt=True)),
    Cell("TILT", _tilt, path="chunked (TILT's method auto)"),
]
BASELINES = ("torch.nn.LSTM", "step loop")


class Row(NamedTuple):
    cell: str
    device: str
    path: str  # the path auto chose
    times: dict[str, list[float]]  # {role: ms per round}
    ratios: dict[str, speed.Ratio]  # {baseline: tsrnn / baseline}


def devices() -> list[torch.device]:
    return [torch.device(d) for d in selftest.devices()]


def measure(cell: Cell, device: torch.device, rounds: int = ROUNDS, clock=None) -> Row:
    """One cell's row: its modules timed in ``rounds`` interleaved rounds (``clock``: a test's seam)."""
    calls = cell.modules(device)
    choice.forget()  # MEMO then holds the choices of this cell's calls only
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = speed.time_rounds(calls, rounds, synchronize=sync, **({"clock": clock} if clock else {}))
    chosen = sorted({path.name for (requested, _), path in choice.MEMO.items() if requested == "auto"})
    ratios = {name: speed.ratio(times["tsrnn"], times[name]) for name in BASELINES if name in times}
    return Row(cell.name, device.type, cell.path or ", ".join(chosen), times, ratios)


def header(rounds: int) -> list[str]:
    return ["tsrnn against torch.nn.LSTM and against the step loop, one training step (forward + backward)",
            *selftest.environment(),
            f"recurrent cells at T={T} B={B} H=I={H}, TILT at T,B,D={TILT_SHAPE} ({TILT_ARGS['n_taus']} τ*, "
            f"k={TILT_ARGS['k']}), float32; "
            f"{rounds} interleaved rounds; ratio = tsrnn's time / the other's (below 1: tsrnn is faster), "
            "median and 95% interval of the per-round ratios"]


def table(rows: list[Row]) -> list[str]:
    """The summary's lines: a header, one line per (cell, device), then any warning."""
    lines = header(rows[0].ratios["step loop"].rounds)
    columns = f"{'cell':<10}{'device':<8}{'tsrnn ms':>10}{'torch.nn.LSTM ms':>18}{'ratio':>24}{'loop ms':>10}{'ratio':>24}  path"
    lines += [columns, "-" * len(columns)]
    for row in rows:
        ms = {name: sorted(t)[len(t) // 2] for name, t in row.times.items()}
        torch_cols = (f"{ms['torch.nn.LSTM']:>18.2f}{str(row.ratios['torch.nn.LSTM']):>24}" if "torch.nn.LSTM" in ms
                      else f"{'n/a':>18}{'':>24}")
        lines.append(f"{row.cell:<10}{row.device:<8}{ms['tsrnn']:>10.2f}{torch_cols}"
                     f"{ms['step loop']:>10.2f}{str(row.ratios['step loop']):>24}  {row.path}")
    reasons = [(row, speed.disagreement(row.times, row.ratios)) for row in rows]
    reasons = [f"  {row.cell} {row.device}: {reason}" for row, reason in reasons if reason]
    if reasons:
        lines += ["WARNING: the repeats disagree (a noisy or throttled machine: other work, a stalled core), so "
                  "these ratios cannot be trusted; run again on a quiet machine:", *reasons]
    return lines


def measure_all(rounds: int = ROUNDS, clock=None) -> list[Row]:
    """Every cell on every device, measured (``clock``: a test's seam, see ``speed.time_rounds``)."""
    return [measure(cell, device, rounds, clock) for device in devices() for cell in CELLS]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=ROUNDS)
    args = p.parse_args(argv)
    print("\n".join(table(measure_all(args.rounds))))


if __name__ == "__main__":
    main()
