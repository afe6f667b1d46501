"""What a forward pass did, recorded from outside the network: a Trace and the weights it watches.

    trace = Trace(all_positions=True, keep_attention=True)
    logits = model.forward(ids, cache, trace=trace)
    trace.residual, trace.attention, trace.final_norm, trace.macs, trace.weight_bytes

transformer() (bytesup.model.forward) does no bookkeeping. Model.forward hands it
`trace.watch(weights, s)` in place of the weights: a provider that passes every read through
and, at each one, notes what the read costs and what the pass's activations (s, its RunState)
hold at that moment. The network reads, in this order:

    the embedding rows          their bytes
    block i's weights           as block i starts: s.x is the residual stream entering it (after
                                the embedding for block 0), s.att the attention weights of block i-1
    output_norm                 after the last block: s.x is the stream after it, s.att its attention
    the head, chunk by chunk    after the final norm: s.xb is the normalized stream it multiplies

Multiply-adds are counted from what was multiplied: every weight matrix handed out times each of
the N tokens, every head chunk the same, and attention's scores and weighted sums from the shape
of its weights (heads x N x keys, each a head_dim-long dot product, twice).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Trace:
    """Pass one to forward() to record what happened.

    residual[0] is the stream after the embedding, residual[i+1] after block i; each is
    (N, d_model) when all_positions else (d_model,) for the last token (cheap). attention[i]
    (heads x queries x keys) only when keep_attention. macs counts the multiply-adds the
    matmuls actually performed (a prefill's attention counts the masked-out entries too: they
    were multiplied); weight_bytes the float32 bytes of weights used, weight_file_bytes the
    same tensors' bytes in the file.
    """

    all_positions: bool = False
    keep_attention: bool = False
    residual: list = field(default_factory=list)
    final_norm: np.ndarray | None = None
    attention: list = field(default_factory=list)
    macs: int = 0
    weight_bytes: int = 0
    weight_file_bytes: int = 0

    def kept(self, x: np.ndarray) -> np.ndarray:
        """A copy of x to keep: all positions, or only the last token's row."""
        return x.copy() if self.all_positions else x[-1].copy()

    def watch(self, weights, s) -> TracedWeights:
        """The weights provider `weights`, watched by this trace, for a pass whose activations are s."""
        return TracedWeights(weights, self, s)


class TracedWeights:
    """A weights provider that records into a Trace what each read costs and what s holds then."""

    def __init__(self, weights, trace: Trace, s):
        self.weights, self.trace, self.s = weights, trace, s
        self.spec, self.gguf = weights.spec, weights.gguf
        self._blocks_started = 0

    def _block_done(self) -> None:
        """A point between two steps: keep the residual stream, and the attention of the block
        just finished (none before block 0)."""
        t, s = self.trace, self.s
        if self._blocks_started:
            t.macs += 2 * s.att.size * self.spec.head_dim  # scores q.k and the weighted sum of v
            if t.keep_attention:
                t.attention.append(s.att.copy())
        t.residual.append(t.kept(s.x))

    def embed_rows(self, ids: np.ndarray) -> np.ndarray:
        rows = self.weights.embed_rows(ids)
        self.trace.weight_bytes += 4 * len(ids) * self.spec.d_model
        self.trace.weight_file_bytes += len(ids) * self.weights.row_file_bytes()
        return rows

    def block(self, i: int):
        self._block_done()
        w = self.weights.block(i)
        self._blocks_started += 1
        t = self.trace
        t.weight_bytes += w.float32_bytes
        t.weight_file_bytes += w.file_bytes
        t.macs += self.s.n * sum(a.size for a in w.arrays() if a.ndim == 2)  # each matrix times each token
        return w

    @property
    def output_norm(self) -> np.ndarray:
        self._block_done()
        norm = self.weights.output_norm
        self.trace.weight_bytes += norm.nbytes
        self.trace.weight_file_bytes += self.gguf.tensor(self.spec.tensor_name("output_norm")).n_bytes
        return norm

    def head_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        t = self.trace
        t.final_norm = t.kept(self.s.xb)
        t.weight_file_bytes += self.weights.head_file_bytes()
        for start, rows in self.weights.head_chunks():
            t.weight_bytes += rows.nbytes
            t.macs += self.s.n * rows.size
            yield start, rows
