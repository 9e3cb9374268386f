"""Frequency discrimination data (tsrnn.lab.data.sine_waves) and its model (tsrnn.lab.models.FrequencyModel)."""
import math

import pytest
import torch

from tsrnn.lab.models import FrequencyModel
from tsrnn.lab.data.sine_waves import MIN_DT, SineBatch, longest, sine_waves


def draw(batch=64, resolution=None, seed=0):
    return sine_waves(batch, resolution, generator=torch.Generator().manual_seed(seed))


def valid_mask(b):
    return torch.arange(b.x.shape[0])[:, None] < b.lengths


@pytest.mark.parametrize("resolution", [None, 1.0, 0.1])
def test_layout_and_padding(resolution):
    b = draw(resolution=resolution)
    L, B = b.x.shape
    assert b.times.shape == b.dt.shape == (L, B) and b.lengths.shape == b.labels.shape == (B,)
    assert b.x.dtype == b.times.dtype == b.dt.dtype == torch.float32
    assert L == int(b.lengths.max()) <= longest(resolution)
    m = valid_mask(b)
    assert (b.x[~m] == 0).all() and (b.times[~m] == 0).all() and (b.dt[~m] == 1).all()
    assert (b.x[m].abs() <= 1).all() and (b.dt >= MIN_DT).all()
    t = b.times.double()
    assert (t[m] >= 0).all() and (t[m] < 125 + 1e-4).all()
    inner = m[1:] & m[:-1]                                  # dt_n = t_n - t_{n-1} after the first sample
    assert torch.allclose(b.dt[1:][inner].double(), (t[1:] - t[:-1])[inner].clamp(min=MIN_DT), atol=1e-5)


def test_async_counts_and_sorted_times():
    b = draw(batch=512)
    assert b.lengths.min() >= 15 and b.lengths.max() <= 124        # int(U(15, 125))
    m = valid_mask(b)
    steps = b.times[1:] - b.times[:-1]
    assert (steps[m[1:]] >= 0).all()                                # sorted within each sequence


@pytest.mark.parametrize("resolution", [1.0, 0.1])
def test_sync_spacing_and_duration(resolution):
    b = draw(batch=256, resolution=resolution)
    m = valid_mask(b)
    steps = (b.times[1:] - b.times[:-1]).double()[m[1:]]
    assert torch.allclose(steps, torch.full_like(steps, resolution), atol=1e-4)
    durations = b.lengths * resolution                                # ceil(D / Δ) samples, D in [15, 125)
    assert durations.min() >= 15 - 1e-9 and durations.max() < 125 + resolution
    assert torch.allclose(b.dt[0].double(), torch.full((256,), resolution, dtype=torch.float64), rtol=0.1)


def test_labels_half_forced_and_balance():
    b = draw(batch=20_000)
    assert (b.labels[:10_000] == 1).all()                              # first half: P ~ U(5, 6)
    rate = b.labels[10_000:].double().mean().item()                   # log-uniform P in [5, 6]
    assert rate == pytest.approx(math.log(6 / 5) / math.log(100), abs=0.01)


def test_label_matches_the_period():
    """A wave of class 1 has a period in [5, 6]: sampled every 0.1 its zero crossings are about
    P / 2 apart; class 0 crossings (outside [5, 6]) are not, for most sequences."""
    b = draw(batch=128, resolution=0.1)

    def half_period(col):
        x = b.x[: b.lengths[col], col].double()
        crossings = torch.nonzero(torch.sign(x[1:]) != torch.sign(x[:-1])).flatten()
        return None if len(crossings) < 3 else (crossings[-1] - crossings[0]).item() * 0.1 / (len(crossings) - 1)

    ones = [half_period(c) for c in range(64)]
    assert all(h is not None and 2.4 <= h <= 3.1 for h in ones)
    zeros = [half_period(c) for c in range(64, 128) if b.labels[c] == 0]
    assert sum(h is not None and 2.4 <= h <= 3.1 for h in zeros) <= 0.2 * len(zeros)


def test_deterministic_given_the_generator():
    a, b = draw(seed=3), draw(seed=3)
    assert all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("x", "times", "dt", "lengths", "labels"))
    assert not torch.equal(draw(seed=4).lengths, a.lengths)


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        sine_waves(0)
    with pytest.raises(ValueError, match="resolution"):
        sine_waves(4, resolution=-0.1)
    with pytest.raises(TypeError, match="generator"):
        sine_waves(4, generator=0)


@pytest.mark.parametrize("cell", ["lstm", "chrono", "plstm"])
@pytest.mark.parametrize("time_input", [False, True])
def test_model_reads_the_last_sample(cell, time_input):
    """Logits (B, 2) from each sequence's last sample: what lies after it (padding) cannot change them."""
    torch.manual_seed(0)
    model = FrequencyModel(cell, hidden_size=12, time_input=time_input, t_max=125.0 if cell == "chrono" else None)
    assert model.rnn.input_size == 1 + time_input
    b = draw(batch=6)
    logits = model(b)
    assert logits.shape == (6, 2)
    m = valid_mask(b)
    noisy = SineBatch(x=torch.where(m, b.x, torch.randn_like(b.x)), times=torch.where(m, b.times, 50.0),
                      dt=torch.where(m, b.dt, 3.0), lengths=b.lengths, labels=b.labels)
    assert torch.allclose(model(noisy), logits, atol=1e-6)
    cut = 7                                                           # a sequence cut short reads earlier
    short = SineBatch(b.x, b.times, b.dt, b.lengths.clamp(max=cut), b.labels)
    assert not torch.allclose(model(short), logits)


def test_plstm_uses_the_step_lengths():
    torch.manual_seed(0)
    model = FrequencyModel("plstm", hidden_size=8)
    b = draw(batch=4)
    stretched = SineBatch(b.x, b.times, b.dt * 3, b.lengths, b.labels)
    assert not torch.allclose(model(stretched), model(b))


def test_model_errors():
    with pytest.raises(TypeError, match="SineBatch"):
        FrequencyModel("lstm", hidden_size=4)(torch.zeros(5, 2))
    with pytest.raises(ValueError, match="t_max"):
        FrequencyModel("chrono", hidden_size=4)


def test_classifier_rejects_lengths_outside_the_sequence():
    from tsrnn.lab.models import SequenceClassifier

    model = SequenceClassifier("lstm", 1, 4, 3)
    x = torch.randn(5, 2, 1)
    for bad in (torch.tensor([0, 3]), torch.tensor([6, 3])):
        with pytest.raises(ValueError, match=r"lengths must be in \[1, 5\]"):
            model(x, bad)
    with pytest.raises(TypeError, match="integer"):
        model(x, torch.tensor([2.0, 3.0]))


def test_time_scale_multiplies_the_time_input_alone():
    """``time_scale`` s feeds s * t: the same model with its time weights divided by s sees the raw t."""
    torch.manual_seed(0)
    scaled = FrequencyModel("lstm", hidden_size=8, time_input=True, time_scale=1 / 125)
    raw = FrequencyModel("lstm", hidden_size=8, time_input=True)
    raw.load_state_dict(scaled.state_dict())
    with torch.no_grad():
        raw.rnn.weight_ih_l0[:, 1] /= 125
    b = draw(batch=5)
    assert torch.allclose(scaled(b), raw(b), atol=1e-5) and "time_scale=0.008" in repr(scaled)
    with torch.no_grad():
        raw.rnn.weight_ih_l0[:, 1] *= 2
    assert not torch.allclose(scaled(b), raw(b), atol=1e-5)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="time_scale must be a positive finite number"):
            FrequencyModel("lstm", hidden_size=8, time_input=True, time_scale=bad)
