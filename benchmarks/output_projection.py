"""Time log-prob + entropy through the output projection, forward + backward, against two autograd peers.

Side by side in this one process, alternating, on SmolLM2-135M's output shape (V = 49,152, H = 576):

* ``naive``: ``log_softmax(hidden @ W.T)`` on all rows at once, plain autograd (what a trainer that
  materialises the logits does; it keeps ``[T, V]`` logits, log-probs and probabilities for backward);
* ``checkpointed``: the same per 256-row chunk under activation checkpointing (grove's implementation
  before the fused function: bounded memory, one recomputed matmul and ~15 passes over each chunk);
* ``grove-cache`` / ``grove-recompute``: :func:`grove.kernels.output_projection.token_logprobs_and_entropy` with the
  softmax cached for backward / recomputed in backward (``train.logit_cache_mb`` above / at 0).

Rows default to one micro-batch of the TRL benchmark (8 completions × ≈ 41 tokens = 326 rows). Each
variant's loss is ``Σ w·log p + Σ u·H`` with fixed random ``w, u``, and its gradients are checked against
``naive`` before timing.

    python benchmarks/output_projection.py --rows 326 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.checkpoint import checkpoint

from grove.infra.runtime import configure_runtime
from grove.kernels.output_projection import DEFAULT_CHUNK_SIZE, token_logprobs_and_entropy


def naive(hidden, weight, targets):
    logp = torch.log_softmax((hidden @ weight.T).float(), dim=-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


def checkpointed(hidden, weight, targets):
    outs = [checkpoint(naive, hidden[s : s + DEFAULT_CHUNK_SIZE], weight, targets[s : s + DEFAULT_CHUNK_SIZE],
                       use_reentrant=False) for s in range(0, hidden.shape[0], DEFAULT_CHUNK_SIZE)]
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])


def grove_cache(hidden, weight, targets):
    return token_logprobs_and_entropy(hidden, weight, targets)


def grove_recompute(hidden, weight, targets):
    return token_logprobs_and_entropy(hidden, weight, targets, cache_bytes=0)


VARIANTS = {"naive": naive, "checkpointed": checkpointed, "grove-cache": grove_cache, "grove-recompute": grove_recompute}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=326)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--host-allocator", default="retain", choices=["retain", "system"])
    args = parser.parse_args()
    configure_runtime(args.threads, args.host_allocator)
    g = torch.Generator().manual_seed(0)
    weight = (0.05 * torch.randn(args.vocab, args.hidden, generator=g)).requires_grad_()
    hidden = torch.randn(args.rows, args.hidden, generator=g).requires_grad_()
    targets = torch.randint(0, args.vocab, (args.rows,), generator=g)
    w, u = torch.randn(args.rows, generator=g), torch.randn(args.rows, generator=g)

    def step(fn):
        logp, entropy = fn(hidden, weight, targets)
        return torch.autograd.grad((w * logp).sum() + (u * entropy).sum(), (hidden, weight))

    reference = step(naive)
    for name, fn in VARIANTS.items():
        for got, want in zip(step(fn), reference, strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3, msg=lambda m, name=name: f"{name}: {m}")
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeats):
        for name, fn in VARIANTS.items():
            start = time.perf_counter()
            step(fn)
            times[name].append(time.perf_counter() - start)
    flop = 3 * 2 * args.rows * args.hidden * args.vocab  # forward, grad hidden, grad weight
    base = statistics.median(times["checkpointed"])
    print(f"rows {args.rows}, vocab {args.vocab}, hidden {args.hidden}, {args.threads} threads, "
          f"host_allocator {args.host_allocator}; gradients equal to naive's")
    print("| variant | median ms | range ms | GFLOP/s (3 matmuls) | speed-up vs checkpointed |")
    print("|---|---|---|---|---|")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"| {name} | {1e3 * med:.1f} | {1e3 * min(values):.1f}–{1e3 * max(values):.1f} | "
              f"{flop / med / 1e9:.0f} | {base / med:.2f}× |")


if __name__ == "__main__":
    main()
