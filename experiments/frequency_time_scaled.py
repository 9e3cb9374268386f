"""Claim 3's "alike with time input" half (seed 002 Table 3, "w/ TIME", async), with the sample
time rescaled: is the frequency record's one "against the claim" at the seed's size (async with
the raw 0-125 time as an input, the LSTM at chance on 3 of 5 seeds) the unscaled input's doing?

The frequency record's async condition with ``--time-input --time-scale 0.008`` (the time over
125, in [0, 1)), the three cells, the seed's recipe and five training seeds, declared in
``protocols/frequency_time_scaled.toml`` before the runs. Test accuracy of the best-validation-loss
checkpoint; the verdict tests the three for equivalence within the protocol's margin
(``common.alike``). Deviation from the seed: the seed feeds the raw time (its text gives no
scaling), so the verdict is never "reproduced" or "reversed"; the raw-time runs are the frequency
record's ``async_time`` row, beside which this record is read.
"""
from __future__ import annotations

from experiments import common, frequency

NAME = "frequency_time_scaled"
CONDITIONS = ("async_time_scaled",)
SIZES = {"full": {"args": [], "seeds": tuple(common.protocol(NAME)["seeds"]), "conditions": CONDITIONS},
         "toy": {**frequency.TOY, "conditions": CONDITIONS}}
verdict = frequency.verdict


def main(argv=None) -> int:
    return frequency.run(NAME, __doc__, argv, SIZES)


if __name__ == "__main__":
    raise SystemExit(main())
