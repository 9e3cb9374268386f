"""``pytest bench/``'s answer: each cell's chosen path against torch.nn.LSTM and its step loop
(bench/speed_summary.py), printed at the end of the run."""
import math

import speed_summary as summary
from conftest import SUMMARY_PROPERTY


def test_summary(record_property):
    rows = summary.measure_all()
    record_property(SUMMARY_PROPERTY, "\n".join(summary.table(rows)))
    assert [(row.cell, row.device) for row in rows] == [(cell.name, device.type) for device in summary.devices()
                                                        for cell in summary.CELLS]
    assert all(math.isfinite(r.median) and r.low <= r.median <= r.high for row in rows for r in row.ratios.values())
