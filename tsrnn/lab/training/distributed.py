"""Multi-process training with PyTorch's own DistributedDataParallel.

``torchrun --nproc_per_node=N -m tsrnn train ...`` sets RANK / WORLD_SIZE / LOCAL_RANK; then each
process joins a gloo (CPU) or NCCL (GPU) group, trains on its shard of the data, and rank 0 alone
writes checkpoints, metrics and the progress bar. Without those variables nothing changes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model DDP-wrapped when several processes train it."""
        if self.world == 1:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def min(self, value: int) -> int:
        """The smallest of an integer over all processes (ranks must agree on the step count)."""
        return self._reduce_int(value, dist.ReduceOp.MIN)

    def max(self, value: int) -> int:
        """The largest of an integer over all processes (one process's signal or divergence stops all)."""
        return self._reduce_int(value, dist.ReduceOp.MAX)

    def _reduce_int(self, value: int, op) -> int:
        if self.world == 1:
            return int(value)
        t = torch.tensor([int(value)], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=op)
        return int(t.item())

    def mean(self, value: float) -> float:
        """The mean of a number over all processes."""
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.item() / self.world


def _torch_build() -> str:
    if torch.version.cuda:
        return f"torch {torch.__version__} is built for CUDA {torch.version.cuda}, but found no usable GPU or driver"
    if getattr(torch.version, "hip", None):
        return f"torch {torch.__version__} is built for ROCm {torch.version.hip}, but no usable GPU was found"
    return f"torch {torch.__version__} is a CPU-only build"


def check_device(device: str | None) -> torch.device | None:
    """``--device`` as a torch.device, or a ValueError saying in one line why it cannot be used here.

    CUDA is only queried when a CUDA device is asked for: ``cpu`` never initializes it. Under torchrun
    (WORLD_SIZE > 1) a CUDA index is replaced by LOCAL_RANK, so only the availability is checked then."""
    if device is None:
        return None
    try:
        want = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device {device!r} is not a device (expected cpu, cuda or cuda:N)") from None
    if want.type == "cpu":
        return want
    if want.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: CUDA is not available ({_torch_build()}); use --device cpu")
        count = torch.cuda.device_count()
        if want.index is not None and want.index >= count and int(os.environ.get("WORLD_SIZE", "1")) == 1:
            gpus = f"{count} GPU{'s' if count != 1 else ''}"
            raise ValueError(f"--device {device}: this machine has {gpus} (cuda:0 to cuda:{count - 1})")
        return want
    backend = getattr(torch, want.type, None) if want.type in ("mps", "xpu") else None
    if backend is not None and backend.is_available():
        return want
    raise ValueError(f"--device {device}: {want.type} is not available here (expected cpu, cuda or cuda:N)")


def setup(device: str | None = None) -> Context:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    want = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if world == 1:
        return Context(device=want)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if want.type == "cuda":
        want = torch.device("cuda", local)
        torch.cuda.set_device(want)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if want.type == "cuda" else "gloo")
    return Context(rank=rank, world=world, device=want)


def finish() -> None:
    """Wait for every process to finish its run (rank 0 may still be writing its last checkpoint):
    a gloo peer that closes its connections while another process still uses them aborts that one.
    After the barrier each process marks its return from it in the group's store (the launcher's
    TCP store, not a gloo connection) and waits for every mark, so that no process tears its
    connections down (``teardown``) while another is still inside the barrier. (CI lost a rank to
    "terminate called without an active exception" twice in 2026-12, with the barrier alone; not
    reproduced here, so this closes one race, not a proven cause.)"""
    if dist.is_initialized():
        dist.barrier()
        store = dist.distributed_c10d._get_default_store()
        store.set(f"tsrnn/finished/{dist.get_rank()}", "1")
        store.wait([f"tsrnn/finished/{rank}" for rank in range(dist.get_world_size())])


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
