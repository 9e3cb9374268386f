"""tsrnn.lab.convert: the pLSTM authors' checkpoint layout -> tsrnn.PowerLawLSTM."""
import pytest
import torch

from tsrnn.lab import convert

T, B, I, H = 12, 3, 5, 7


def authors_checkpoint(learn_p=True, seed=0):
    """A state dict with the authors' model keys: gate rows (r, o, g), one bias, p as a logit."""
    g = torch.Generator().manual_seed(seed)
    cell = {"weight_ih": torch.randn(3 * H, I, generator=g, dtype=torch.float64) / I ** 0.5,
            "weight_hh": torch.randn(3 * H, H, generator=g, dtype=torch.float64) / H ** 0.5,
            "bias": torch.randn(3 * H, generator=g, dtype=torch.float64) * 0.5}
    if learn_p:
        cell["p"] = torch.randn(H, generator=g, dtype=torch.float64)
    state = {convert.AUTHORS_PREFIX + k: v for k, v in cell.items()}
    state["linear.weight"] = torch.zeros(10, H, dtype=torch.float64)  # the rest of their model
    return state


def authors_equations(x, state, p, eps):
    """The authors' cell as their paper's copy-task code computes it: absolute time t = 0, 1, ...,
    reference time k (k_0 = -1) reset to t - ε, f = ((t - k + ε) / (t - k + 1))^p, i = 1 - f."""
    cell = {k[len(convert.AUTHORS_PREFIX):]: v for k, v in state.items() if k.startswith(convert.AUTHORS_PREFIX)}
    h = torch.zeros(x.shape[1], H, dtype=x.dtype)
    c, k = torch.zeros_like(h), torch.zeros_like(h) - 1
    out = []
    for t in range(x.shape[0]):
        z = x[t] @ cell["weight_ih"].T + h @ cell["weight_hh"].T + cell["bias"]
        r, o, g = z.chunk(3, 1)
        r, o, g = torch.sigmoid(r), torch.sigmoid(o), torch.tanh(g)
        k = r * (t - eps) + (1 - r) * k
        f = ((t - k + eps) / (t - k + 1)) ** p
        c = f * c + (1 - f) * g
        h = o * torch.tanh(c)
        out.append(h)
    return torch.stack(out)


@pytest.mark.parametrize("learn_p", [True, False])
def test_converted_model_computes_the_authors_cell(learn_p):
    state = authors_checkpoint(learn_p)
    p_fixed = 0.3
    p = torch.sigmoid(state[convert.AUTHORS_PREFIX + "p"]) if learn_p else torch.full((H,), p_fixed, dtype=torch.float64)
    x = torch.randn(T, B, I, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    eps = 1e-12  # the two ε conventions (t - ε vs t) coincide as ε -> 0
    model = convert.plstm_from_authors(state, p=None if learn_p else p_fixed, eps=eps)
    assert model.learn_p == learn_p and model.input_gate == "coupled"
    torch.testing.assert_close(model.p(0), p)
    out, _ = model(x)
    want = authors_equations(x, state, p, eps)
    assert (out - want).abs().max() < 1e-9
    # At the default ε the conventions differ by O(ε) where units were not just reset.
    out3, _ = convert.plstm_from_authors(state, p=None if learn_p else p_fixed)(x)
    gap = (out3 - authors_equations(x, state, p, 1e-3)).abs().max()
    assert 0 < gap < 1e-2  # measured: 1.3e-3


def test_a_bare_cell_state_dict_converts_with_an_empty_prefix():
    state = {k[len(convert.AUTHORS_PREFIX):]: v for k, v in authors_checkpoint().items()
             if k.startswith(convert.AUTHORS_PREFIX)}
    model = convert.plstm_from_authors(state, prefix="", batch_first=True)
    assert model.batch_first and model.weight_hh_l0.shape == (3 * H, H)
    assert torch.equal(model.bias_hh_l0, torch.zeros(3 * H, dtype=torch.float64))


def test_conversion_errors_name_what_is_wrong():
    with pytest.raises(KeyError, match=r"weight_ih"):
        convert.plstm_from_authors({"linear.weight": torch.zeros(2, 2)})
    state = authors_checkpoint(learn_p=False)
    with pytest.raises(ValueError, match=r"pass its value as p"):
        convert.plstm_from_authors(state)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        convert.plstm_from_authors(state, p=1.5)
    with pytest.raises(ValueError, match=r"leave p=None"):
        convert.plstm_from_authors(authors_checkpoint(learn_p=True), p=0.3)
    bad = dict(state)
    bad[convert.AUTHORS_PREFIX + "bias"] = torch.zeros(2 * H, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"bias"):
        convert.plstm_from_authors(bad, p=0.3)
