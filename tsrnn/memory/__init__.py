"""The memory science: timescales, the Laplace grid and TILT, averaging memory, and contexts."""
