"""Markov-PTB: a corpus sampled from the bigram chain of a real one (seed 000 §3.1.1, Figure 1).

Seed 000: "As a control, we also generated a Markovian version of the PTB dataset. Using the
empirical bigram probabilities from PTB, we sampled tokens sequentially until a new corpus of the
same size had been generated." An LSTM LM trained on it should need a single timescale (§3.2.1),
where one trained on PTB needs an Inverse-Gamma distribution of them.

The chain is first order, estimated by counting without smoothing:

    P(w_t = j | w_{t-1} = i) = c(i, j) / c(i, ·),   c(i, ·) = Σ_j c(i, j),

over the token stream of the training split (each line's tokens, then ``<eos>``), read as a
closed loop: the last token is followed by the first, which for a stream of whole lines is the
pair (``<eos>``, first word) that starts every other line too. The loop gives every token of the
stream a successor, so the chain never reaches a dead end, and c(i, ·) equals the unigram count
c(i). No smoothing: the paper samples from the empirical bigram probabilities, and add-k
smoothing would put mass on ~10^8 bigrams PTB never shows, a different corpus. The counts are
kept sparse (one row of successors per word: 265K bigrams for PTB), never as a V x V matrix.

Files: ``write_markov_corpus`` writes ``ptb.train.txt``, ``ptb.valid.txt``, ``ptb.test.txt`` in
PTB's format (one sentence a line, tokens between spaces, ``<eos>`` as the line end), which
``tsrnn.lab.data.load_text_corpus`` and ``tsrnn train --data DIR`` read. Each split is one run of the
chain, started after ``<eos>`` (a line start), of the source split's length in tokens (with
``<eos>``), then continued to the end of its last sentence (a few tokens more) so that the file
holds whole lines; the paper states only "the same size". The paper does not say which splits it
estimated the chain from: tsrnn uses train, the split the vocabulary comes from. A rare word the
sampled train split happens to miss leaves the new corpus's vocabulary (PTB seed 1: 9,989 of
10,000 words) and maps to ``<unk>`` in its valid and test splits.

    python -m tsrnn.lab.data.markov PTB_DIR OUT_DIR [--seed S] [--tokens N]
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
from dataclasses import dataclass

import torch

from tsrnn import _validation as check
from tsrnn.lab.data.text import SPLITS, load_text_corpus

FILES = {split: f"ptb.{split}.txt" for split in SPLITS}


@dataclass(repr=False)
class MarkovChain:
    """A first-order chain over ids 0..V-1 in sparse (CSR) form: the successors of state i are
    ``successors[offsets[i]:offsets[i+1]]`` (ascending), seen ``counts[...]`` times after i."""

    offsets: torch.Tensor     # (V + 1,) int64
    successors: torch.Tensor  # (E,) int64
    counts: torch.Tensor      # (E,) int64, every one >= 1
    start: int                # the state before the first sample by default: the stream's last id

    @classmethod
    def fit(cls, ids, num_states: int) -> "MarkovChain":
        """Count the bigrams of the id stream ``ids`` (1-D, values in [0, num_states)), read as a loop."""
        num_states = check.count("num_states", num_states)
        ids = check.token_ids("ids", ids, 1, num_states).cpu()
        pairs, counts = torch.unique(ids * num_states + ids.roll(-1), return_counts=True)  # sorted by (i, j)
        offsets = torch.zeros(num_states + 1, dtype=torch.long)
        offsets[1:] = torch.bincount(pairs // num_states, minlength=num_states).cumsum(0)
        return cls(offsets, pairs % num_states, counts, int(ids[-1]))

    def __repr__(self) -> str:
        return f"MarkovChain(states={self.num_states}, bigrams={self.successors.numel()}, tokens={self.tokens})"

    @property
    def num_states(self) -> int:
        return self.offsets.numel() - 1

    @property
    def tokens(self) -> int:
        """The length of the stream the chain was counted on."""
        return int(self.counts.sum())

    def row_counts(self) -> torch.Tensor:
        """c(i, ·) for every state i: (V,) int64 (0 for a state the stream never shows)."""
        return torch.zeros(self.num_states, dtype=torch.long).index_add_(0, self._rows(), self.counts)

    def _rows(self) -> torch.Tensor:
        return torch.repeat_interleave(torch.arange(self.num_states), self.offsets.diff())

    def transition_matrix(self) -> torch.Tensor:
        """P(j | i) = c(i, j) / c(i, ·) as a sparse (COO, coalesced) (V, V) float64 tensor (rows of
        unseen states empty)."""
        rows = self._rows()
        probs = self.counts.double() / self.row_counts()[rows].double()
        return torch.sparse_coo_tensor(torch.stack([rows, self.successors]), probs, (self.num_states,) * 2,
                                       is_coalesced=True, check_invariants=False)

    def sample(self, n: int, generator: torch.Generator | None = None, start: int | None = None,
               until: int | None = None) -> torch.Tensor:
        """``n`` ids drawn in turn, w_t ~ P(· | w_{t-1}), w_0 drawn after ``start`` (default
        ``self.start``); with ``until``, continued past ``n`` until that id is drawn. One uniform
        per token from ``generator`` (float64), so a seed gives the same corpus on every machine."""
        n = check.count("n", n)
        start = self.start if start is None else check.index("start", start, self.num_states)
        if until is not None:
            check.index("until", until, self.num_states)
        offsets, successors = self.offsets.tolist(), self.successors.tolist()
        ends = self.counts.cumsum(0).tolist()  # cumulative counts over all rows
        if offsets[start] == offsets[start + 1]:
            raise ValueError(f"start state {start} never occurs in the stream the chain was counted on")
        out, state, t = [], start, 0
        uniforms = torch.rand(n, generator=generator, dtype=torch.float64).tolist()
        while t < n or (until is not None and state != until):
            if t == len(uniforms):
                uniforms += torch.rand(64, generator=generator, dtype=torch.float64).tolist()
            lo, hi = offsets[state], offsets[state + 1]
            base = ends[lo - 1] if lo else 0
            total = ends[hi - 1] - base
            r = base + min(int(uniforms[t] * total), total - 1)  # uniform in [base, base + c(i, ·))
            state = successors[bisect.bisect_right(ends, r, lo, hi)]
            out.append(state)
            t += 1
        return torch.tensor(out, dtype=torch.long)


def fit_markov_chain(ids, num_states: int) -> MarkovChain:
    """``MarkovChain.fit``: the bigram chain of an id stream."""
    return MarkovChain.fit(ids, num_states)


def _lines(words: list[str], eos: str) -> str:
    """PTB's layout: each sentence on a line between spaces, ``<eos>`` not written."""
    lines, line = [], []
    for word in words:
        if word == eos:
            lines.append(" " + " ".join(line) + " \n" if line else "\n")
            line = []
        else:
            line.append(word)
    if line:
        lines.append(" " + " ".join(line) + " \n")
    return "".join(lines)


def write_markov_corpus(source, out, seed: int = 0, tokens: int | None = None, overwrite: bool = False) -> dict:
    """Markov-PTB: fit the bigram chain of ``source``'s train split (a PTB / WikiText-2 directory)
    and write ``ptb.train.txt``, ``ptb.valid.txt``, ``ptb.test.txt`` sampled from it into ``out``,
    each as long as the source's split in tokens (with ``<eos>``), completed to a whole last
    sentence; ``tokens`` sets the train length and scales valid and test by the source's ratios.
    Samples with ``torch.Generator().manual_seed(seed)``, train then valid then test. Also writes
    ``markov.json`` (source, seed, chain size, split lengths), and returns that dict."""
    seed = check.count("seed", seed, minimum=0)
    corpus = load_text_corpus(source)
    if corpus.vocab.eos_id is None:
        raise ValueError(f"{source}: the corpus has no <eos> to end lines with")
    out = os.fspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"{out} must be a directory")
    present = [f for f in FILES.values() if os.path.exists(os.path.join(out, f))]
    if present and not overwrite:
        raise ValueError(f"{out} already holds {', '.join(present)} (pass overwrite=True / --overwrite to replace)")
    sizes = {split: getattr(corpus, split).numel() for split in SPLITS}
    if tokens is not None:
        tokens = check.count("tokens", tokens)
        sizes = {split: max(1, round(size * tokens / sizes["train"])) for split, size in sizes.items()}
    chain = MarkovChain.fit(corpus.train, len(corpus.vocab))
    generator = torch.Generator().manual_seed(seed)
    eos = corpus.vocab.eos_id
    os.makedirs(out, exist_ok=True)
    written = {}
    for split in SPLITS:
        ids = chain.sample(sizes[split], generator, start=eos, until=eos)
        with open(os.path.join(out, FILES[split]), "w", encoding="utf-8") as f:
            f.write(_lines(corpus.vocab.decode(ids), corpus.vocab.itos[eos]))
        written[split] = ids.numel()
    info = {"source": os.path.abspath(os.fspath(source)), "seed": seed, "order": 1, "smoothing": None,
            "fitted_on": "train", "states": chain.num_states, "bigrams": chain.successors.numel(),
            "source_tokens": {split: getattr(corpus, split).numel() for split in SPLITS}, "tokens": written}
    with open(os.path.join(out, "markov.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(info, indent=1) + "\n")
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tsrnn.lab.data.markov",
                                     description="Write Markov-PTB (seed 000 §3.1.1): a corpus sampled from the "
                                                 "bigram chain of a PTB-layout corpus's train split.")
    parser.add_argument("source", help="corpus directory (ptb.train.txt ... or train.txt ...)")
    parser.add_argument("out", help="directory for ptb.train.txt, ptb.valid.txt, ptb.test.txt and markov.json")
    parser.add_argument("--seed", type=int, default=0, help="seed of the torch.Generator (default 0)")
    parser.add_argument("--tokens", type=int, help="train tokens with <eos> (default: the source's; valid and "
                                                   "test keep their ratio to train)")
    parser.add_argument("--overwrite", action="store_true", help="replace split files already in OUT")
    args = parser.parse_args(argv)
    try:
        info = write_markov_corpus(args.source, args.out, args.seed, args.tokens, args.overwrite)
    except (OSError, ValueError, TypeError) as exc:
        print(f"tsrnn.lab.data.markov: error: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    sizes = ", ".join(f"{split} {n}" for split, n in info["tokens"].items())
    print(f"wrote Markov-PTB ({info['bigrams']} bigrams of {info['states']} words, seed {info['seed']}) in "
          f"{args.out}: {sizes} tokens with <eos>")
    return 0


if __name__ == "__main__":
    sys.exit(main())
