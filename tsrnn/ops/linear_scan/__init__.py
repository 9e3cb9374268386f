"""The linear scan op: x_t = a_t x_{t-1} + u_t elementwise over time."""
