"""Time-major batches for the three LM regimes, and sharding for distributed training.

- ``batchify`` + ``bptt_batches``: B contiguous streams cut into BPTT windows, state carried
  across windows (seed 000, the PyTorch word_language_model example).
- ``sentence_batches``: one sentence per column, padded, memory restarted at every column
  (seed 001, the averaging LM).
- ``document_batches``: documents packed into B streams with a reset mark at every document
  start and a mask on the cross-document target (seed 004, the MLP LM with a cleared context).

Every function checks its arguments when called, before the first batch is drawn.
"""
from __future__ import annotations

import heapq
import math
from typing import Iterator, Sequence

import torch

from tsrnn import _validation as check


def batchify(ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """(N, B): ``ids`` cut into B contiguous streams, one per column; the remainder is dropped.

    ids (L,) integer; column b is ids[b*N:(b+1)*N] with N = L // B. N must be >= 2, so that a
    window has at least one (input, target) pair.
    """
    check.token_ids("ids", ids, 1)
    batch_size = check.count("batch_size", batch_size)
    steps = ids.numel() // batch_size
    if steps < 2:
        raise ValueError(f"ids has {ids.numel()} tokens, too few for batch_size={batch_size}: "
                         f"each stream needs at least 2 tokens ({2 * batch_size} in all)")
    return ids[: steps * batch_size].view(batch_size, steps).t().contiguous()


def num_bptt_batches(stream: torch.Tensor, bptt: int) -> int:
    """How many windows ``bptt_batches(stream, bptt)`` yields: ceil((N - 1) / bptt)."""
    check.token_ids("stream", stream, 2)
    bptt = check.count("bptt", bptt)
    return math.ceil(max(stream.shape[0] - 1, 0) / bptt)


def bptt_batches(stream: torch.Tensor, bptt: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) windows of a (N, B) stream: x = stream[i:i+T], y = stream[i+1:i+1+T], T <= bptt.

    Windows start at 0, bptt, 2*bptt, ...; the last one may be shorter. Every token but the
    first of each column is a target exactly once. x, y are views of ``stream``.
    """
    check.token_ids("stream", stream, 2)
    bptt = check.count("bptt", bptt)
    steps = stream.shape[0]

    def windows():
        for i in range(0, steps - 1, bptt):
            t = min(bptt, steps - 1 - i)
            yield stream[i:i + t], stream[i + 1:i + 1 + t]

    return windows()


def sentence_batches(ids: torch.Tensor, eos_id: int, batch_size: int, length: int = 35, shuffle: bool = False,
                     generator: torch.Generator | None = None, drop_last: bool = False, long: str = "truncate",
                     pad_id: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, y, mask) batches of sentences, one per column, each (length, B') with B' <= batch_size.

    A sentence is the run of ``ids`` up to and including an ``eos_id`` (a last run without one
    is a sentence too). Its column has targets y = the sentence's tokens, eos included, and
    inputs x = the token before each: ``eos_id`` first (the previous sentence's end, or a start
    mark for the first), then its words. So the columns are the stream itself, cut at sentence
    ends, and a model that restarts its memory at row 0 predicts every token of ``ids`` once.

    length: rows per batch (seed 001: 35). A sentence with more targets is cut to its first
    ``length`` (``long="truncate"``, seed 001: "we truncate all sentences longer than 35
    words") or split into consecutive pieces, one column each (``long="split"``).
    Padding: x and y hold ``pad_id`` (default ``eos_id``) past a sentence's end, where mask
    (length, B') bool is False. Empty lines (a lone eos) are kept: x = [eos], y = [eos].
    Order: the order of ``ids`` ("taken from the dataset in sequence"), or a permutation of the
    sentences from ``generator`` if ``shuffle``. drop_last drops a last batch with B' < batch_size.
    """
    check.token_ids("ids", ids, 1)
    eos_id = check.count("eos_id", eos_id, minimum=0)
    batch_size = check.count("batch_size", batch_size)
    length = check.count("length", length)
    check.choice("long", long, ("truncate", "split"))
    pad_id = eos_id if pad_id is None else check.count("pad_id", pad_id, minimum=0)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    n = ids.numel()
    if n == 0:
        raise ValueError("ids is empty: no sentence to batch")
    ids = ids.long()
    ends = (ids == eos_id).nonzero().squeeze(1)  # inclusive ends
    if ends.numel() == 0 or int(ends[-1]) != n - 1:
        ends = torch.cat([ends, ends.new_tensor([n - 1])])
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    sizes = ends - starts + 1
    if long == "split":
        pieces = (sizes + length - 1) // length
        first = torch.repeat_interleave(starts, pieces)
        offset = torch.arange(int(pieces.sum())) - torch.repeat_interleave(torch.cumsum(pieces, 0) - pieces, pieces)
        starts = first + offset * length
        sizes = torch.minimum(torch.repeat_interleave(sizes, pieces) - offset * length, torch.tensor(length))
    else:
        sizes = sizes.clamp(max=length)
    rows = torch.arange(length)[:, None]
    mask = rows < sizes[None, :]  # (length, S)
    index = (starts[None, :] + rows).clamp(max=n - 1)
    inputs = torch.cat([ids.new_tensor([eos_id]), ids[:-1]])
    x = torch.where(mask, inputs[index], pad_id)
    y = torch.where(mask, ids[index], pad_id)
    count = x.shape[1]
    order = torch.randperm(count, generator=generator) if shuffle else torch.arange(count)
    stop = count - count % batch_size if drop_last else count

    def batches():
        for i in range(0, stop, batch_size):
            cols = order[i:i + batch_size]
            yield x[:, cols], y[:, cols], mask[:, cols]

    return batches()


def document_batches(documents: Sequence[torch.Tensor], batch_size: int, bptt: int, shuffle: bool = False,
                     generator: torch.Generator | None = None, pad_id: int = 0
                     ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(x, y, reset, mask) BPTT windows, each (T, B) with T <= bptt, of documents packed in B streams.

    Packing: documents in order (or permuted by ``generator`` if ``shuffle``) each go to the
    stream with the fewest tokens so far (lowest index on ties), so streams are balanced to
    within one document and keep the documents' order. Streams are padded to the longest with
    ``pad_id``. reset is True at the first token of every document: clear the context there.
    y is the next token of the same document; at a document's last token and in padding there
    is no target, and mask is False (a document's first token is never a target: its context
    would be the previous document). mask.sum() over all windows = sum(len(d) - 1).
    State carries across windows, as with ``bptt_batches``; empty documents are skipped.
    """
    if isinstance(documents, torch.Tensor) or not isinstance(documents, Sequence):
        raise TypeError(f"documents must be a list of 1-D id tensors, got {type(documents).__name__}")
    for i, doc in enumerate(documents):
        check.token_ids(f"documents[{i}]", doc, 1)
    batch_size = check.count("batch_size", batch_size)
    bptt = check.count("bptt", bptt)
    pad_id = check.count("pad_id", pad_id, minimum=0)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    docs = [d for d in documents if d.numel()]
    if not docs:
        raise ValueError("documents holds no token")
    if shuffle:
        docs = [docs[i] for i in torch.randperm(len(docs), generator=generator).tolist()]
    heap = [(0, b) for b in range(batch_size)]
    placed = []  # (stream, offset, doc)
    for doc in docs:
        load, b = heapq.heappop(heap)
        placed.append((b, load, doc))
        heapq.heappush(heap, (load + doc.numel(), b))
    steps = max(load for load, _ in heap)
    x = torch.full((steps, batch_size), pad_id, dtype=torch.long)
    y = torch.full((steps, batch_size), pad_id, dtype=torch.long)
    reset = torch.zeros(steps, batch_size, dtype=torch.bool)
    mask = torch.zeros(steps, batch_size, dtype=torch.bool)
    for b, at, doc in placed:
        size = doc.numel()
        x[at:at + size, b] = doc
        y[at:at + size - 1, b] = doc[1:]
        reset[at, b] = True
        mask[at:at + size - 1, b] = True

    def windows():
        for i in range(0, steps, bptt):
            yield x[i:i + bptt], y[i:i + bptt], reset[i:i + bptt], mask[i:i + bptt]

    return windows()


def shard(data, rank: int, world_size: int):
    """The part of ``data`` for one rank of ``world_size``; the parts are disjoint.

    data: 1-D ids -> the rank-th of world_size equal contiguous slices (the remainder of
    len % world_size tokens is dropped), so every rank gets as many tokens; a list of
    documents -> documents[rank::world_size] (every rank gets at least one).
    """
    world_size = check.count("world_size", world_size)
    rank = check.index("rank", rank, world_size)
    if isinstance(data, torch.Tensor):
        check.token_ids("data", data, 1)
        size = data.numel() // world_size
        if size == 0:
            raise ValueError(f"data has {data.numel()} tokens, fewer than world_size={world_size}")
        return data[rank * size:(rank + 1) * size]
    if isinstance(data, Sequence) and not isinstance(data, str):
        if len(data) < world_size:
            raise ValueError(f"data has {len(data)} documents, fewer than world_size={world_size}")
        return list(data[rank::world_size])
    raise TypeError(f"data must be a 1-D id tensor or a list of documents, got {type(data).__name__}")
