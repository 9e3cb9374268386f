"""TILT on the CPU at seed 004's size (Brown: V=13,000 words, D=30, N=8 τ*, T=2000, B=32):
the fast paths and the literal reference, forward+backward w.r.t. the embeddings, and the
one-hot formulation that integrates the whole vocabulary (forward only: its backward would keep
T x B x (N+2k) x V numbers, 53 GB here).

The 8 τ* grow as seed 004's grid, c = 0.1 (1 to 1.1^7), with its k = 4: receptive fields of mass
1.11. Over [1, 50] (c = 0.75) they would have mass 16.4, which TILT warns about; the time does not
depend on the τ*, only on N + 2k rates.
"""
import pytest
import torch

import tsrnn
from tsrnn import reference
from tsrnn.memory import laplace

V, D, N, T, B, K = 13_000, 30, 8, 2000, 32, 4
TAU_MAX = 1.1 ** (N - 1)  # seed 004's growth c = 0.1


def setup(steps=T):
    g = torch.Generator().manual_seed(0)
    words = torch.randint(V, (steps, B), generator=g)
    embedding = torch.randn(V, D, generator=g) * 0.1
    reset = torch.zeros(steps, B, dtype=torch.bool)
    reset[torch.randint(steps, (B,), generator=g), torch.arange(B)] = True  # one document start per row
    return words, embedding, reset


def one_hot_tilt(words, embedding, n_taus=N, k=K):
    """The vocabulary formulation: leaky integrators over V-dim one-hot vectors, read out through
    Post's operator, then projected by the embedding matrix, one step at a time."""
    grid = laplace.grid(n_taus, 1.0, TAU_MAX, k)
    decay, beta = (t.float() for t in laplace.decay_and_input_weight(grid.s, 1.0, "exact"))
    post = laplace.post_operator(n_taus, k, 0.0, grid).float()
    steps, batch = words.shape
    # Buffers reused at every step: a fresh 13 MB temporary per step grew glibc's heap to 24 GB
    # (measured peak RSS over T = 2000); with them the peak is 0.4 GB.
    F = torch.zeros(batch, grid.s.shape[0], V)
    readout = torch.empty(batch, n_taus, V)
    y = torch.empty(steps, batch, n_taus, embedding.shape[1])
    rows = torch.arange(batch)
    for t, w_t in enumerate(words):
        F.mul_(decay[None, :, None])
        F[rows, :, w_t] += beta
        torch.matmul(post, F, out=readout)
        torch.matmul(readout, embedding, out=y[t])
    return y


def test_fast_path_agrees_before_timing():
    words, embedding, reset = setup(steps=120)
    y, _ = tsrnn.TILT(n_taus=N, tau_max=TAU_MAX, k=K)(embedding[words], reset=reset)
    y_ref, _ = reference.tilt(embedding[words].double(), n_taus=N, tau_max=TAU_MAX, k=K, reset=reset)
    assert (y.double() - y_ref).abs().max() / y_ref.abs().max() < 1e-6
    with torch.no_grad():
        y_vocab = one_hot_tilt(words, embedding)
    y_plain, _ = tsrnn.TILT(n_taus=N, tau_max=TAU_MAX, k=K)(embedding[words])
    assert (y_vocab - y_plain).abs().max() / y_plain.abs().max() < 1e-3  # float32 k-th difference


@pytest.mark.parametrize("method", ["chunked", "scan", "fft"])
def test_tilt_fast_paths(benchmark, method):
    benchmark.group = f"TILT T={T} B={B} D={D} N={N} fwd+bwd"
    words, embedding, reset = setup()
    embedding.requires_grad_()
    tilt = tsrnn.TILT(n_taus=N, tau_max=TAU_MAX, k=K, method=method)
    use_reset = None if method == "fft" else reset

    def step():
        y, _ = tilt(embedding[words], reset=use_reset)
        y.square().mean().backward()

    benchmark(step)


def test_tilt_literal_reference(benchmark):
    benchmark.group = f"TILT T={T} B={B} D={D} N={N} fwd+bwd"
    words, embedding, reset = setup()
    embedding.requires_grad_()

    def step():
        y, _ = reference.tilt(embedding[words], n_taus=N, tau_max=TAU_MAX, k=K, reset=reset)
        y.square().mean().backward()

    benchmark.pedantic(step, rounds=2, iterations=1)


def test_tilt_one_hot_vocabulary_forward(benchmark):
    benchmark.group = f"TILT T={T} B={B} D={D} N={N} forward, one-hot over V={V}"
    words, embedding, _ = setup()
    with torch.no_grad():
        benchmark.pedantic(one_hot_tilt, args=(words, embedding), rounds=1, iterations=1)


def test_tilt_chunked_forward(benchmark):
    benchmark.group = f"TILT T={T} B={B} D={D} N={N} forward, one-hot over V={V}"
    words, embedding, reset = setup()
    tilt = tsrnn.TILT(n_taus=N, tau_max=TAU_MAX, k=K)
    with torch.no_grad():
        benchmark(lambda: tilt(embedding[words], reset=reset))


@pytest.mark.parametrize("steps,batch,taus,tau_max", [(8000, 32, 8, TAU_MAX), (2000, 128, 30, 50.0)])
def test_tilt_larger(benchmark, steps, batch, taus, tau_max):
    benchmark.group = "TILT larger fwd+bwd"
    g = torch.Generator().manual_seed(1)
    u = torch.randn(steps, batch, D, generator=g).requires_grad_()
    tilt = tsrnn.TILT(n_taus=taus, tau_max=tau_max, k=K)

    def step():
        tilt(u)[0].square().mean().backward()

    benchmark.pedantic(step, rounds=3, iterations=1)
