"""DistributedDataParallel over 2 CPU processes (gloo, loopback): gradients are averaged, so after
a step the parameters are equal on both ranks and equal to one process on the global batch."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tsrnn
from tsrnn.lab.training import distributed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build():
    torch.manual_seed(0)
    return torch.nn.ModuleDict({"rnn": tsrnn.LSTM(3, 8, num_layers=2, timescales=[torch.full((8,), 4.0), None]),
                                "head": torch.nn.Linear(8, 2)})


def loss_of(model, x, y):
    out, _ = model["rnn"](x)
    return torch.nn.functional.mse_loss(model["head"](out), y)


def global_batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(6, 4, 3, generator=g), torch.randn(6, 4, 2, generator=g)


def worker(rank, world, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    ctx = distributed.setup("cpu")
    model = build()
    x, y = global_batch()
    shard = slice(rank * 2, rank * 2 + 2)  # each rank: 2 of the 4 sequences
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)

    class Step(torch.nn.Module):  # DDP averages the gradients of its wrapped module's forward
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, y):
            return loss_of(self.inner, x, y)

    step = ctx.wrap(Step(model))
    loss = step(x[:, shard], y[:, shard])
    loss.backward()
    optimizer.step()
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, os.path.join(out_dir, f"rank{rank}.pt"))
    distributed.finish()  # as the trainer does: a rank that leaves the gloo group first can abort its peer
    distributed.teardown()


@pytest.mark.slow  # a training script in its own process
@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_two_processes_average_gradients(tmp_path):
    mp.spawn(worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    single = build()
    x, y = global_batch()
    optimizer = torch.optim.SGD(single.parameters(), lr=0.5)
    loss_of(single, x, y).backward()
    optimizer.step()
    moved = False
    for name, value in single.state_dict().items():
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs across ranks"
        torch.testing.assert_close(rank0[name], value, atol=1e-6, rtol=1e-5, msg=f"{name} != single process")
        moved |= not torch.equal(value, build().state_dict()[name])
    assert moved
