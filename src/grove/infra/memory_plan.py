"""Peak-memory planner: what a configured run will need, before it runs (``grove config show``).

The estimate adds the resident pieces of a training step for a decoder-only transformer:

* policy weights, gradients and AdamW's two moments (float32 master copies: 4 × 4 bytes/param);
* the reference model's weights when β > 0;
* training activations of one micro-batch: per token and layer, the tensors autograd keeps for a
  LLaMA-style block (norm inputs, q/k/v, attention output, MLP gate/up/activation/down input,
  residuals): ≈ ``(8·hidden + 2·kv_dim + 4·intermediate)`` values, in the compute dtype; with the
  shared-prefix forward, the prompt is counted once per group, not once per completion;
* the generation KV cache: ``2 · layers · kv_dim`` values per token for every row;
* the output projection (:mod:`grove.core.output_projection`): the float32 probabilities and log-probs of one
  micro-batch's predicted tokens when they fit in ``train.logit_cache_mb`` (kept from forward to
  backward), else two ``[chunk, vocab]`` float32 buffers; plus a float32 ``[vocab, hidden]`` gradient
  accumulator.

It is an estimate (allocator overhead, the Python runtime and framework buffers come on top: budget
~1 GB more on CPU); ``docs/benchmarks.md`` compares it with measured peak RSS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from grove.core.output_projection import DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_SIZE, cache_bytes_needed

GiB = 1024**3


@dataclass(frozen=True)
class ModelDims:
    num_params: int
    hidden: int
    intermediate: int
    layers: int
    kv_dim: int  # num_key_value_heads × head_dim
    vocab: int

    @classmethod
    def from_model_dir(cls, path: Path) -> ModelDims:
        """Read dimensions from ``config.json`` and parameter counts from the safetensors headers."""
        config = json.loads((path / "config.json").read_text())
        hidden = config["hidden_size"]
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or hidden // heads
        kv_heads = config.get("num_key_value_heads") or heads
        return cls(
            num_params=_count_params(path),
            hidden=hidden,
            intermediate=config.get("intermediate_size", 4 * hidden),
            layers=config["num_hidden_layers"],
            kv_dim=kv_heads * head_dim,
            vocab=config["vocab_size"],
        )


def _count_params(path: Path) -> int:
    total = 0
    for file in sorted(path.glob("*.safetensors")):
        with file.open("rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_len))
        for name, info in header.items():
            if name != "__metadata__":
                count = 1
                for d in info["shape"]:
                    count *= d
                total += count
    return total


@dataclass(frozen=True)
class RunShape:
    prompt_tokens: int  # longest prompt, in tokens
    max_new_tokens: int
    prompts_per_step: int
    completions_per_prompt: int
    micro_batch_size: int
    shared_prefix: bool
    reference_model: bool
    compute_bytes: int = 4  # 2 under bf16 autocast
    bf16_generation_copy: bool = False  # rollout.bf16_weights
    logits_chunk: int = DEFAULT_CHUNK_SIZE
    logit_cache_bytes: int = DEFAULT_CACHE_BYTES  # train.logit_cache_mb


def estimate_peak_bytes(m: ModelDims, r: RunShape) -> dict[str, float]:
    """Bytes of each resident component at the peak of a step (the training phase)."""
    per_token_layer = 8 * m.hidden + 2 * m.kv_dim + 4 * m.intermediate
    if r.shared_prefix:
        groups = max(1, -(-r.micro_batch_size // r.completions_per_prompt))
        tokens = groups * r.prompt_tokens + r.micro_batch_size * r.max_new_tokens
    else:
        tokens = r.micro_batch_size * (r.prompt_tokens + r.max_new_tokens)
    rows = r.prompts_per_step * r.completions_per_prompt
    parts = {
        "policy weights (fp32)": 4.0 * m.num_params,
        "gradients (fp32)": 4.0 * m.num_params,
        "AdamW moments (fp32)": 8.0 * m.num_params,
        "reference model": 4.0 * m.num_params if r.reference_model else 0.0,
        "bf16 generation copy": 2.0 * m.num_params if r.bf16_generation_copy else 0.0,
        "activations (one micro-batch)": float(tokens * m.layers * per_token_layer * r.compute_bytes),
        "generation KV cache": float(2 * m.layers * m.kv_dim * rows * (r.prompt_tokens + r.max_new_tokens) * r.compute_bytes),
    }
    cache = cache_bytes_needed(r.micro_batch_size * r.max_new_tokens, m.vocab)
    if cache <= r.logit_cache_bytes:
        parts["output-projection softmax cache"] = float(cache)
    else:
        parts["output-projection chunks"] = float(cache_bytes_needed(r.logits_chunk, m.vocab))
    parts["output-projection gradient"] = float(4 * m.vocab * m.hidden)
    parts["total"] = sum(parts.values())
    return parts
