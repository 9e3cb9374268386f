"""The GPU probe's parts (bench/gpu_probe.py runs them in order): where a recurrent step's time goes."""
