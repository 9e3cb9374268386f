"""The seed models (tsrnn.lab.models): shapes, learning, AWD-LSTM weight drop and regularizers, fixed
MTS biases, tied weights, the averaging memory (S10), the MLP contexts' receptive fields, chrono
initialization and bad arguments. Tiny sizes: the whole file runs in seconds on 2 CPU cores."""
import pytest
import torch
import torch.nn.functional as F

from tsrnn.lab.models import (AWDLSTMLM, MLPLM, AveragingLM, CopyModel, DyckModel, embedded_dropout,
                          locked_dropout)
from tsrnn.lab.models.awd_lstm import CELLS as AWD_CELLS
from tsrnn.lab.data.copy import copy_baseline_loss, copy_task
from tsrnn.lab.data.dyck import DYCK_PAD, dyck_mse, encode_dyck
from tsrnn.memory.timescales import bias_from_timescale, inverse_gamma_quantiles, lm_timescales

V, T, B = 50, 7, 3          # vocab, steps, batch (all different)
E, HS = 16, (24, 20, 16)    # embedding and AWD layer sizes (last = E for tying)


def tokens(steps=T, batch=B, vocab=V, seed=0):
    return torch.randint(vocab, (steps, batch), generator=torch.Generator().manual_seed(seed))


def awd(cell="lstm", **kw):
    torch.manual_seed(0)
    return AWDLSTMLM(V, E, HS, cell=cell, **kw)


def lm_loss(logits, x):
    """Next-token cross-entropy: logits at t predict x[t + 1]."""
    return F.cross_entropy(logits[:-1].reshape(-1, logits.shape[-1]), x[1:].reshape(-1))


def train(model, loss_fn, steps, lr=1e-2, **opt):
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr, **opt)
    for _ in range(steps):
        optimizer.zero_grad()
        loss_fn().backward()
        optimizer.step()


# --------------------------------------------------------------------------------------------
# AWD-LSTM: shapes, state, learning
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cell", AWD_CELLS)
def test_awd_shapes_and_state(cell):
    model = awd(cell)
    x = tokens()
    logits, state, extras = model(x)
    assert logits.shape == (T, B, V)
    parts = 3 if cell == "plstm" else 2
    assert len(state) == len(HS) and all(len(s) == parts for s in state)
    zero = model.init_state(B)
    for k, size in enumerate(HS):
        assert [tuple(s.shape) for s in state[k]] == [(1, B, size)] * parts
        assert [tuple(s.shape) for s in zero[k]] == [(1, B, size)] * parts
        assert extras.raw_outputs[k].shape == extras.dropped_outputs[k].shape == (T, B, size)
    # Truncated BPTT: the detached state carries values but no graph.
    detached = model.detach_state(state)
    assert all(not s.requires_grad for layer in detached for s in layer)
    assert all(torch.equal(a, b) for la, lb in zip(detached, state) for a, b in zip(la, lb))
    # Eval with an explicit zero state equals eval with none; a carried state changes the output.
    model.eval()
    a, _, _ = model(x)
    b, s1, _ = model(x, model.init_state(B))
    c, _, _ = model(x, s1)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


@pytest.mark.parametrize("cell", AWD_CELLS)
def test_awd_learns_a_sequence(cell):
    """With every AWD regularizer on, a few Adam steps memorize one tiny batch (eval loss)."""
    model = awd(cell)
    x = tokens(steps=12, batch=2, seed=1)
    model.eval()
    before = lm_loss(model(x)[0], x).item()
    model.train()

    def loss():
        logits, _, extras = model(x)
        return lm_loss(logits, x) + model.regularization(extras)

    train(model, loss, steps=100, lr=3e-2)
    model.eval()
    after = lm_loss(model(x)[0], x).item()
    assert before > 3.5          # ~log(50) untrained
    assert after < 0.5 * before, (before, after)


def test_awd_eval_is_deterministic_and_train_is_not():
    model = awd()
    x = tokens()
    model.eval()
    assert torch.equal(model(x)[0], model(x)[0])
    model.train()
    assert not torch.equal(model(x)[0], model(x)[0])


# --------------------------------------------------------------------------------------------
# Weight drop (DropConnect on W_hh)
# --------------------------------------------------------------------------------------------
def capture_used_whh(layer):
    """Record the W_hh a layer actually runs with (the substituted one under functional_call)."""
    seen = []

    def hook(module, args):
        w = module.weight_hh_l0
        if w.requires_grad and not w.is_leaf:
            w.retain_grad()
        seen.append(w)

    return seen, layer.register_forward_pre_hook(hook)


@pytest.mark.parametrize("cell", AWD_CELLS)
def test_weight_drop_trains_the_raw_weight(cell):
    p = 0.5
    model = awd(cell, wdrop=p, dropout=0.0, dropouth=0.0, dropouti=0.0, dropoute=0.0)
    params_before = dict(model.named_parameters())
    raws = [rnn.weight_hh_l0 for rnn in model.rnns]
    hooks = [capture_used_whh(rnn) for rnn in model.rnns]
    x = tokens(seed=2)
    logits, _, _ = model(x)
    lm_loss(logits, x).backward()
    for k, (raw, (seen, handle)) in enumerate(zip(raws, hooks)):
        handle.remove()
        used = seen[0]
        assert used is not raw and not isinstance(used, torch.nn.Parameter)
        dropped = used == 0
        frac = dropped.double().mean().item()
        assert 0.4 < frac < 0.6, f"layer {k}: dropped fraction {frac}"
        # Kept entries are the raw ones scaled by 1/(1 - p) (inverted dropout).
        assert torch.allclose(used[~dropped], raw.detach()[~dropped] / (1 - p))
        # The raw Parameter gets the gradient, zero exactly at the dropped entries ...
        assert raw.grad is not None and raw.grad.abs().sum() > 0
        assert torch.equal(raw.grad == 0, dropped), f"layer {k}: zero pattern of grad != mask"
        # ... and the chain rule through the mask elsewhere.
        assert torch.allclose(raw.grad, used.grad * (~dropped) / (1 - p), atol=1e-7)
    # The Parameters are the same objects as before (nothing re-wrapped or deleted).
    assert dict(model.named_parameters()).keys() == params_before.keys()
    assert all(a is b for a, b in zip(model.parameters(), params_before.values()))
    # Plain SGD moves the kept entries of the raw weight and leaves the dropped ones alone.
    # (The gradients are ~1e-7 here: lr 1e3 makes the steps visible in float32.)
    snapshot = [r.detach().clone() for r in raws]
    masks = [seen[0] == 0 for seen, _ in hooks]
    torch.optim.SGD(model.parameters(), lr=1e3).step()
    for raw, old, dropped in zip(raws, snapshot, masks):
        changed = raw.detach() != old
        assert changed.float().mean() > 0.3
        assert not (changed & dropped).any()


def test_weight_drop_new_mask_each_forward_and_none_in_eval():
    model = awd(wdrop=0.5)
    seen, handle = capture_used_whh(model.rnns[1])
    x = tokens()
    model(x)
    model(x)
    model.eval()
    model(x)
    handle.remove()
    assert not torch.equal(seen[0] == 0, seen[1] == 0)
    assert seen[2] is model.rnns[1].weight_hh_l0          # eval: the raw Parameter itself


def test_wdrop_zero_uses_raw_weight_in_training():
    model = awd(wdrop=0.0)
    seen, handle = capture_used_whh(model.rnns[0])
    model(tokens())
    handle.remove()
    assert seen[0] is model.rnns[0].weight_hh_l0


# --------------------------------------------------------------------------------------------
# AWD dropouts and regularizers
# --------------------------------------------------------------------------------------------
def test_embedded_dropout_drops_whole_words():
    torch.manual_seed(3)
    weight = torch.randn(V, E)
    x = torch.arange(10).repeat(4)[:, None].expand(40, B)     # each word 4 x B times
    out = embedded_dropout(weight, x, 0.5, training=True)
    kept = out.abs().sum(-1) > 0                               # (40, B)
    for word in range(10):
        at = x == word
        assert kept[at].all() or not kept[at].any(), "a word was dropped at some positions only"
        if kept[at].all():
            assert torch.allclose(out[at], 2 * weight[word].expand(int(at.sum()), E))
    assert 0 < kept.float().mean() < 1
    assert torch.equal(embedded_dropout(weight, x, 0.5, training=False), weight[x])


def test_locked_dropout_shares_the_mask_over_time():
    torch.manual_seed(4)
    out = locked_dropout(torch.ones(T, B, 40), 0.5, training=True)
    assert torch.equal(out, out[:1].expand_as(out))
    assert set(out.unique().tolist()) == {0.0, 2.0}
    x = torch.randn(T, B, 4)
    assert locked_dropout(x, 0.5, training=False) is x


def test_regularization_ar_tar():
    x = tokens()
    off = awd(alpha=0.0, beta=0.0)
    _, _, extras = off(x)
    reg = off.regularization(extras)
    assert reg.item() == 0.0 and reg.shape == ()
    model = awd(alpha=2.0, beta=1.0)
    _, _, extras = model(x)
    raw, dropped = extras.raw_outputs[-1], extras.dropped_outputs[-1]
    ar = 2.0 * dropped.pow(2).mean()
    tar = 1.0 * (raw[1:] - raw[:-1]).pow(2).mean()
    assert ar > 0 and tar > 0
    assert torch.allclose(model.regularization(extras), ar + tar)
    only_ar = awd(alpha=2.0, beta=0.0)
    assert torch.allclose(only_ar.regularization(extras), ar)
    # AR reads the dropped output, TAR the raw one: they differ in training mode.
    assert not torch.equal(raw, dropped)
    # One step: TAR has no pair of steps and contributes 0 (no NaN).
    _, _, one = model(x[:1])
    assert torch.isfinite(model.regularization(one))


def test_tied_weights_share_storage():
    model = awd()
    assert model.decoder.weight is model.encoder.weight
    assert model.decoder.weight.data_ptr() == model.encoder.weight.data_ptr()
    assert sum(p is model.encoder.weight for p in model.parameters()) == 1
    untied = awd(tie_weights=False)
    assert untied.decoder.weight is not untied.encoder.weight
    with pytest.raises(ValueError, match="tie_weights"):
        AWDLSTMLM(V, 10, (24, 12))
    AWDLSTMLM(V, 10, (24, 12), tie_weights=False)


def test_mts_layers_use_the_seed_timescales():
    model = awd("mts")
    want = lm_timescales(HS, alpha=0.56)
    assert torch.allclose(model.rnns[0].timescales(0), want[0])
    assert torch.allclose(model.rnns[1].timescales(0), want[1])
    assert model.rnns[2].timescales(0) is None
    assert model.rnns[0].timescales(0)[: HS[0] // 2].sub(3).abs().max() < 1e-5   # float32 biases
    H = HS[1]
    assert torch.allclose(model.rnns[1].gate_biases(0)[H:2 * H].double(), bias_from_timescale(want[1]), atol=1e-5)


@pytest.mark.parametrize("freeze", ["gates", "all"])
def test_mts_fixed_biases_survive_training(freeze):
    """Adam with weight decay moves every trainable bias but not the fixed MTS ones."""
    model = awd("mts", mts_freeze=freeze)
    fixed = {k: model.rnns[k].gate_biases(0).detach().clone() for k in range(3)}
    x = tokens(seed=5)

    def loss():
        logits, _, extras = model(x)
        return lm_loss(logits, x) + model.regularization(extras)

    train(model, loss, steps=3, lr=1e-2, weight_decay=0.1)
    for k in (0, 1):
        now = model.rnns[k].gate_biases(0)
        n = 2 * HS[k] if freeze == "gates" else 4 * HS[k]
        assert torch.equal(now[:n], fixed[k][:n]), f"layer {k}: fixed biases moved"
        if freeze == "gates":
            assert not torch.equal(now[n:], fixed[k][n:]), f"layer {k}: g/o biases did not train"
    assert not torch.equal(model.rnns[2].gate_biases(0), fixed[2])   # layer 3 learns all biases


# --------------------------------------------------------------------------------------------
# AveragingLM (seed 001, S10)
# --------------------------------------------------------------------------------------------
def avg_model(**kw):
    torch.manual_seed(0)
    return AveragingLM(V, embedding_size=E, hidden_size=12, **kw)


def test_averaging_lm_matches_manual_s10():
    model = avg_model().eval()
    x = tokens()
    reset = torch.zeros(T, B, dtype=torch.bool)
    reset[4, 1] = True
    h, _ = model.rnn(model.encoder(x))
    m = torch.zeros_like(h)
    for b in range(B):
        start = 0
        for t in range(T):
            if reset[t, b]:
                start = t
            m[t, b] = h[start:t, b].sum(0) / (t - start + 1)    # h_0 = 0 counts once
    want = model.decoder(torch.tanh(model.concat(torch.cat([h, m], -1))))
    assert torch.allclose(model(x, reset), want, atol=1e-6)
    assert model(x).shape == (T, B, V)
    assert not torch.allclose(model(x, reset), model(x))


def test_averaging_lm_memory_carries_earlier_tokens():
    """With the h_t half of W_c zeroed, the output sees the LSTM only through the memory m_t,
    which holds h_{<t}: logits at t ignore token t but change with token t - 1."""
    model = avg_model().eval()
    with torch.no_grad():
        model.concat.weight[:, :12] = 0
    x = tokens()
    y = x.clone()
    y[3] = (y[3] + 1) % V
    a, b = model(x), model(y)
    assert torch.equal(a[:4], b[:4])             # m_0..m_3 do not hold h_3
    assert not torch.allclose(a[4:], b[4:])      # m_4.. do
    # A memory reset at step 5 hides steps < 5 from m_5: logits there are softmax(W_s tanh(b_c)).
    reset = torch.zeros(T, B, dtype=torch.bool)
    reset[5] = True
    out = model(x, reset)
    const = model.decoder(torch.tanh(model.concat.bias))
    assert torch.allclose(out[5], const.expand(B, V), atol=1e-6)
    assert torch.allclose(out[0], const.expand(B, V), atol=1e-6)


def test_averaging_lm_without_memory_reads_h_t_alone():
    model = avg_model(memory=False).eval()
    assert model.concat.in_features == 12
    x = tokens()
    h, _ = model.rnn(model.encoder(x))
    want = model.decoder(torch.tanh(model.concat(h)))
    assert torch.allclose(model(x), want, atol=1e-6)
    reset = torch.zeros(T, B, dtype=torch.bool)
    reset[3] = True
    assert torch.equal(model(x, reset), model(x))    # no memory to restart


def test_averaging_lm_init_tying_and_learning():
    model = avg_model(dropout=0.1)
    assert model.decoder.weight is model.encoder.weight
    H = 12
    for k in range(2):
        b = model.rnn.gate_biases(k)
        assert torch.equal(b[H:2 * H], torch.ones(H)) and torch.equal(b[:H], torch.zeros(H))
    assert model.rnn.weight_hh_l0.abs().max() <= 0.05
    x = tokens(steps=12, batch=2, seed=6)
    model.eval()
    before = lm_loss(model(x), x).item()
    model.train()
    train(model, lambda: lm_loss(model(x), x), steps=100, lr=3e-2)
    model.eval()
    assert lm_loss(model(x), x).item() < 0.5 * before


# --------------------------------------------------------------------------------------------
# MLPLM (seed 004)
# --------------------------------------------------------------------------------------------
CONTEXTS = ["buffer", "tilt", "tilt-buffer"]


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("direct", [False, True])
def test_mlp_lm_shapes(context, direct):
    model = MLPLM(V, 8, 16, context=context, n=4, direct=direct)
    assert model(tokens()).shape == (T, B, V)
    assert (model.direct_output is not None) == direct
    assert model.hidden.in_features == 4 * 8


@pytest.mark.parametrize("context", CONTEXTS)
def test_mlp_lm_receptive_field(context):
    """Logits at t depend on tokens <= t only; the buffer sees exactly tokens t-n+1..t, TILT
    further back."""
    n, steps = 3, 20
    torch.manual_seed(0)
    model = MLPLM(V, 8, 16, context=context, n=n).eval()
    x = tokens(steps=steps, batch=2, seed=7)
    t0 = 6
    y = x.clone()
    y[t0] = (y[t0] + 1) % V
    a, b = model(x), model(y)
    diff = (a - b).abs().amax(dim=(1, 2))                 # per step
    assert torch.all(diff[:t0] == 0), "logits depend on a later token"
    assert diff[t0] > 0 and diff[t0 + n - 1] > 0
    if context == "buffer":
        assert torch.all(diff[t0 + n:] == 0), "buffer sees more than n tokens back"
    elif context == "tilt":
        assert diff[t0 + n + 3] > 0, "TILT should reach beyond n steps"
    # Document starts: after a reset at step s, tokens before s do not matter.
    reset = torch.zeros(steps, 2, dtype=torch.bool)
    reset[t0 + 1] = True
    a, b = model(x, reset), model(y, reset)
    assert torch.allclose(a[t0 + 1:], b[t0 + 1:], atol=1e-6)


@pytest.mark.parametrize("context", CONTEXTS)
def test_mlp_lm_learns(context):
    torch.manual_seed(0)
    model = MLPLM(V, 8, 32, context=context, n=3)
    x = tokens(steps=16, batch=2, seed=8)
    before = lm_loss(model(x), x).item()
    train(model, lambda: lm_loss(model(x), x), steps=40)
    assert lm_loss(model(x), x).item() < 0.5 * before


# --------------------------------------------------------------------------------------------
# DyckModel (seed 000 §3.1.2)
# --------------------------------------------------------------------------------------------
def test_dyck_model_shapes_padding_and_mts():
    torch.manual_seed(0)
    model = DyckModel("mts", hidden_size=16)
    split = encode_dyck(["([])", "[]", "(()[])"])
    probs = model(split.tokens)
    assert probs.shape == (6, 3, 2) and bool(((probs > 0) & (probs < 1)).all())
    # Padding enters as a zero vector.
    h, _ = model.rnn(torch.cat([F.one_hot(split.tokens[:2, 1], 4).float(), torch.zeros(4, 4)])[:, None])
    assert torch.allclose(probs[:, 1], torch.sigmoid(model.output(h[:, 0])), atol=1e-6)
    assert torch.allclose(model.rnn.timescales(0), inverse_gamma_quantiles(16, 1.5))
    assert DyckModel("lstm", hidden_size=16).rnn.timescales(0) is None
    with pytest.raises(ValueError, match="tokens"):
        model(torch.full((3, 2), DYCK_PAD + 1))


@pytest.mark.parametrize("cell", ["lstm", "mts"])
def test_dyck_model_learns_and_keeps_fixed_biases(cell):
    torch.manual_seed(0)
    model = DyckModel(cell, hidden_size=16)
    split = encode_dyck(["(([]))[]", "[()]", "([[]])()", "[[(())]]"])
    fixed = model.rnn.gate_biases(0).detach()[:32].clone()

    def loss():
        return dyck_mse(model(split.tokens), split.labels, split.lengths)

    before = loss().item()
    train(model, loss, steps=60, lr=2e-2)
    assert loss().item() < 0.5 * before
    if cell == "mts":
        assert torch.equal(model.rnn.gate_biases(0)[:32], fixed)


# --------------------------------------------------------------------------------------------
# CopyModel (seed 002 §4.1)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cell", ["lstm", "chrono", "plstm"])
def test_copy_model_shapes(cell):
    model = CopyModel(cell, hidden_size=16, t_max=30.0 if cell == "chrono" else None)
    x, _ = copy_task(B, 5)
    assert model(x).shape == (x.shape[0], B, 10)
    assert CopyModel(cell, hidden_size=8, n_symbols=3, t_max=30.0 if cell == "chrono" else None)(
        torch.randint(5, (T, B))).shape == (T, B, 5)


def test_chrono_initialization_is_trainable():
    H, t_max = 64, 30.0
    model = CopyModel("chrono", hidden_size=H, t_max=t_max, generator=torch.Generator().manual_seed(0))
    b = model.rnn.gate_biases(0).detach()
    b_i, b_f = b[:H], b[H:2 * H]
    assert torch.allclose(b_i, -b_f)
    assert b_f.min() >= 0 and b_f.max() <= torch.log(torch.tensor(t_max - 1)) + 1e-6
    assert b_f.std() > 0.3                                     # spread over log U[1, t_max - 1]
    assert b_f.mean() > 2.0                                    # far above PyTorch's U(-1/8, 1/8)
    x, y = copy_task(4, 5, generator=torch.Generator().manual_seed(1))
    train(model, lambda: F.cross_entropy(model(x).reshape(-1, 10), y.reshape(-1)), steps=1)
    assert not torch.equal(model.rnn.gate_biases(0).detach()[:2 * H], b[:2 * H])
    with pytest.raises(ValueError, match="t_max"):
        CopyModel("chrono", hidden_size=8)
    with pytest.raises(ValueError, match="t_max"):
        CopyModel("lstm", hidden_size=8, t_max=10.0)


@pytest.mark.parametrize("cell", ["lstm", "chrono", "plstm"])
def test_copy_model_learns(cell):
    """A tiny copy task (2 symbols of 3, delay 3) on one fixed batch: the loss falls below the
    memoryless baseline, so the model stores the symbols."""
    torch.manual_seed(0)
    model = CopyModel(cell, hidden_size=24, n_symbols=3, t_max=8.0 if cell == "chrono" else None)
    x, y = copy_task(16, 3, n_copy=2, n_symbols=3, generator=torch.Generator().manual_seed(2))

    def loss():
        return F.cross_entropy(model(x).reshape(-1, 5), y.reshape(-1))

    before = loss().item()
    train(model, loss, steps=200, lr=3e-2)
    after = loss().item()
    assert after < 0.5 * copy_baseline_loss(3, n_copy=2, n_symbols=3) < before, (before, after)


# --------------------------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------------------------
def test_bad_arguments():
    with pytest.raises(ValueError, match="cell"):
        AWDLSTMLM(V, E, HS, cell="gru")
    with pytest.raises(ValueError, match="wdrop"):
        AWDLSTMLM(V, E, HS, wdrop=1.0)
    with pytest.raises(ValueError, match="alpha"):
        AWDLSTMLM(V, E, HS, alpha=-1.0)
    with pytest.raises(ValueError, match="hidden_sizes"):
        AWDLSTMLM(V, E, ())
    model = awd()
    with pytest.raises(TypeError, match="tokens"):
        model(torch.zeros(T, B))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.full((T, B), V))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(T, B, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="state"):
        model(tokens(), model.init_state(B)[:2])
    with pytest.raises(ValueError, match="context"):
        MLPLM(V, context="lstm")
    with pytest.raises(ValueError, match="cell"):
        DyckModel("plstm")
    with pytest.raises(ValueError, match="dropout"):
        AveragingLM(V, 8, 8, dropout=1.5)
    with pytest.raises(ValueError, match="cell"):
        CopyModel("gru")
