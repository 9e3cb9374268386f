"""The frequency discrimination data, kept under its first name: it lives in
``tsrnn.data.sine_waves`` now, and this module re-exports its names."""
from tsrnn.data.sine_waves import SineBatch, longest, sine_waves
from tsrnn.data.sine_waves import (MAX_DURATION, MAX_POINTS, MIN_DT, MIN_DURATION, MIN_POINTS,  # noqa: F401
                                   PERIODS, TARGET)

__all__ = ["SineBatch", "sine_waves", "longest"]
