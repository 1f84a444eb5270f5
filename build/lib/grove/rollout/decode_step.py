"""One decode step of the static-cache engine over its fixed tensors, and its replay as a CUDA graph.

:class:`DecodeStep` feeds each slot's last token through the decoder (writing its key and value at the step's
column), draws the next token from the uniform table (:func:`grove.rollout.sampling.sample_tokens`), and records it:
token, log-prob, length, end-of-sequence. Every tensor it touches is allocated before it runs and every quantity
that changes between steps (the step index, the column, the positions, the tokens) lives in a device tensor, so the
step is the same sequence of kernels every time: :class:`StepRunner` runs it eagerly once per batch size (the
warm-up is a real step), captures it as a CUDA graph (capture records kernels and runs none), and replays the graph
for every later step of that batch size. On a CPU, or with ``rollout.cuda_graphs: false``, every step runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from grove.rollout.decode_rows import DecodeRows
from grove.rollout.decode_weights import DecodeWeights
from grove.rollout.decoder_forward import attention_mask, decoder_forward
from grove.rollout.generated_rows import EOS
from grove.rollout.rotary_table import RotaryTable
from grove.rollout.sampling import sample_tokens
from grove.rollout.static_kv_cache import StaticKVCache

__all__ = ["DecodeStep", "StepRunner", "bucket_for"]


def bucket_for(count: int) -> int:
    """The batch size a step of ``count`` rows runs at: the smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, … (powers of
    two and 1.5 times them) holding them. Rows are padded up to it, so one captured graph serves many counts and a
    padded batch is at most a third larger than its rows."""
    power = 1
    while True:
        for size in (power, power * 3 // 2):
            if size >= count:
                return max(size, 1)
        power *= 2


@dataclass
class DecodeStep:
    """The step over the engine's tensors (see the module docstring). ``uniforms`` ``[R + 1, S]``: each slot's
    global row's uniform numbers (row ``R``: the padding slots'); ``base_column`` ``[1]``: the first decode column
    (the prompt block's width); sampling settings are fixed per step object (a captured graph bakes them in)."""

    weights: DecodeWeights
    rotary: RotaryTable
    cache: StaticKVCache
    rows: DecodeRows
    uniforms: Tensor
    base_column: Tensor
    eos: Tensor
    temperature: float
    top_k: int
    top_p: float

    def forward(self, count: int) -> None:
        """Feed slots ``0 … count-1``'s next tokens, then :meth:`record` the tokens they draw."""
        rows = self.rows
        keys, values, valid = self.cache.front(count)
        column = self.base_column + rows.step - 1  # the fed token was drawn at step - 1
        mask = attention_mask(valid, self.cache.columns, column)
        logits = decoder_forward(
            self.weights, self.rotary, rows.next_token[:count, None], rows.position[:count, None], keys, values,
            column, mask,
        )
        rows.position[:count] += 1
        self.record(logits, count)

    def record(self, logits: Tensor, count: int) -> None:
        """Draw token ``step`` of slots ``0 … count-1`` from ``logits [count, V]`` and record it; slots already
        finished draw too (their tokens lie past their lengths)."""
        rows = self.rows
        step = rows.step
        flat = rows.global_row[:count] * self.uniforms.shape[1] + step
        tokens, logprobs = sample_tokens(logits, self.temperature, self.top_k, self.top_p, self.uniforms.view(-1)[flat])
        running = ~rows.done[:count]
        rows.tokens[:count].index_copy_(1, step, tokens[:, None])
        rows.logprobs[:count].index_copy_(1, step, logprobs.float()[:, None])
        rows.length[:count] += running
        ended = running & (tokens[:, None] == self.eos).any(-1)  # a comparison per end token (no search, no sync)
        rows.reason[:count].masked_fill_(ended, EOS)
        rows.done[:count] |= ended
        rows.next_token[:count].copy_(tokens)
        step += 1


class StepRunner:
    """Runs :meth:`DecodeStep.forward` for a batch size: eagerly, or (``graphs``) as a CUDA graph captured on the
    size's first step and replayed afterwards. ``captures`` counts the graphs captured."""

    def __init__(self, step: DecodeStep, graphs: bool) -> None:
        self.step = step
        self.graphs_enabled = graphs
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.pool = None
        self.captures = 0

    def run(self, count: int) -> None:
        graph = self.graphs.get(count)
        if graph is not None:
            graph.replay()
            return
        self.step.forward(count)  # the size's first step runs eagerly: real work, and the capture's warm-up
        if self.graphs_enabled:
            self.graphs[count] = self._capture(lambda: self.step.forward(count))

    def _capture(self, fn: Callable[[], None]) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            fn()
        self.pool = graph.pool()
        self.captures += 1
        return graph
