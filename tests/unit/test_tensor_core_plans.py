"""The tensor-core kernels' plans as the dispatcher reads them (tsrnn.ops.recurrence.tensor_core_plans):
each answer of a planning op asked once per key (its forcing variable part of the key), nothing
asked while torch.compile traces, a configuration turned into a regime, a refusal that says why.
The planning ops are faked: no GPU is needed."""
import pytest
import torch

from tsrnn.ops.recurrence import tensor_core_plans
from tsrnn.ops.recurrence.op import CLUSTER, GRID

CPU = torch.device("cpu")


@pytest.fixture
def asked(monkeypatch):
    """Fake planning ops of both kernels on a fresh memo; returns the list of their calls."""
    calls = []
    monkeypatch.setattr(tensor_core_plans, "_plans", {})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # a device without an index: the current one
    for namespace, config in ((CLUSTER, [2, 16, 1, 32, 0, 0]), (GRID, [4, 8, 3, 16, 0, 0, 2, 8, 5, 32])):
        operators = getattr(torch.ops, namespace)

        def plan(cell, w_hh, batch, precision, namespace=namespace):
            calls.append(("plan", namespace, cell, w_hh.shape[1], batch, precision))
            return int(w_hh.shape[1] <= 64)

        def configuration(cell, w_hh, batch, precision, namespace=namespace, config=config):
            calls.append(("config", namespace, cell, w_hh.shape[1], batch, precision))
            return config

        monkeypatch.setattr(operators, "recurrence_plan", plan)
        monkeypatch.setattr(operators, "recurrence_config", configuration)
    for variable in tensor_core_plans.FORCING.values():
        monkeypatch.delenv(variable, raising=False)
    return calls


def test_each_answer_is_asked_once_per_key_and_forcing(asked, monkeypatch):
    assert tensor_core_plans.blocks(CLUSTER, CPU, "lstm", 32, 20, "tf32") == 1
    assert tensor_core_plans.blocks(CLUSTER, CPU, "lstm", 32, 20, "tf32") == 1
    assert asked == [("plan", CLUSTER, "lstm", 32, 20, "tf32")]
    tensor_core_plans.blocks(CLUSTER, CPU, "lstm", 32, 20, "bf16")
    tensor_core_plans.blocks(GRID, CPU, "lstm", 32, 20, "tf32")
    monkeypatch.setenv("TSRNN_CLUSTER", "2,16")
    tensor_core_plans.blocks(CLUSTER, CPU, "lstm", 32, 20, "tf32")
    assert len(asked) == 4
    assert set(tensor_core_plans._plans) >= {("recurrence_plan", CLUSTER, 0, "lstm", 32, 20, "tf32", "2,16")}


def test_nothing_is_asked_while_torch_compile_traces(asked, monkeypatch):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert tensor_core_plans.blocks(CLUSTER, CPU, "lstm", 32, 20, "tf32") == 0
    assert tensor_core_plans.regime(GRID, CPU, "lstm", 32, 20, "tf32") == (0,)
    assert asked == []


def test_the_regime_is_the_plans_cluster_tile_and_units_for_each_direction(asked):
    assert tensor_core_plans.regime(CLUSTER, CPU, "lstm", 32, 20, "tf32") == (2, 16, 32)
    assert tensor_core_plans.regime(GRID, CPU, "lstm", 32, 20, "tf32") == (4, 8, 16, 2, 8, 32)


def test_a_refusal_says_what_the_plan_needs(asked):
    assert tensor_core_plans.refusal(CLUSTER, CPU, "lstm", 64, 20, "tf32") is None
    assert tensor_core_plans.refusal(GRID, CPU, "plstm_coupled", 128, 20, "bf16") == (
        "H=128, B=20 does not fit: W_hh (bf16 operands) and the batch's partial sums must fit in the shared "
        "memory of blocks that are all resident at once")
