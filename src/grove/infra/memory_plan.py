"""Peak-memory planner: what a configured run will need, before it runs (``grove config show``).

The estimate adds the resident pieces of a training step for a decoder-only transformer:

* policy weights, gradients and AdamW's two moments (float32 master copies: 4 × 4 bytes/param; 2 × 2 bytes
  for the moments with ``optim.state_dtype: bf16``);
* the bf16 generation copy (on by default under ``train.precision: bf16``), or on a CPU without it the copy in
  the model's dtype whose linear weights are prepacked (``rollout.prepacked_weights``); it is freed while the
  update runs and the KV cache lives only during generation, so adding both to the update's pieces errs on the
  safe side;
* the reference model's weights when β > 0;
* with LoRA (``model.lora``, :mod:`grove.models.lora`): the full weights, frozen (no gradient, no AdamW
  state), plus the adapters with their gradients and AdamW moments (4 × 4 bytes per adapter parameter,
  ``r · (in + out)`` per targeted projection, :func:`lora_parameter_count`); no reference copy (the reference
  is the same model with its adapters disabled) and no ``[vocab, hidden]`` head gradient (the head is frozen);
* training activations of one micro-batch: per token and layer, the tensors autograd keeps for a
  LLaMA-style block (norm inputs, q/k/v, attention output, MLP gate/up/activation/down input,
  residuals): ≈ ``(8·hidden + 2·kv_dim + 4·intermediate)`` values, in the compute dtype; with the
  shared-prefix forward, the prompt is counted once per group, not once per completion; with
  ``train.activation_checkpointing`` one hidden vector per layer and token plus one layer's set;
* the generation KV cache: ``2 · layers · kv_dim`` values per token for every row;
* the weights of the models the rewards load themselves (a ``sequence_classifier`` reward model, a ``judge``):
  parameters × bytes of their precision, a line of their own (:func:`grove.config.derived.reward_model_bytes`);
* the output projection (:mod:`grove.kernels.output_projection`): the float32 probabilities and log-probs of one
  micro-batch's predicted tokens when they fit in ``train.logit_cache_mb`` (kept from forward to
  backward), else two ``[chunk, vocab]`` float32 buffers; plus a float32 ``[vocab, hidden]`` gradient
  accumulator.

With several processes (``processes`` > 1, ``distributed.strategy``; docs/distributed.md) the estimate is per
rank: each rank generates ``1/N`` of the rows; under ``ddp`` every rank holds the full model state; under
``fsdp2`` weights, gradients, AdamW moments (and the reference model) are ``1/N`` per rank, plus the full
replica generation decodes on (fp32, or bf16 with ``rollout.bf16_weights``) and two decoder layers'
gathered parameters and gradients (the one running and the one prefetched). With several ranks, rank 0 also
holds a full copy of the weights and AdamW moments while it writes a checkpoint (full state dicts,
:mod:`grove.distributed.checkpoint_state`).

It is an estimate (allocator overhead, the Python runtime and framework buffers come on top: budget
~1 GB more on CPU); ``docs/benchmarks.md`` compares it with measured peak RSS.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grove.kernels.output_projection import DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_SIZE, cache_bytes_needed

GiB = 1024**3


@dataclass(frozen=True)
class ModelDims:
    num_params: int
    hidden: int
    intermediate: int
    layers: int
    kv_dim: int  # num_key_value_heads × head_dim
    vocab: int
    attention_dim: int | None = None  # num_attention_heads × head_dim (None: hidden)

    @property
    def q_dim(self) -> int:
        return self.hidden if self.attention_dim is None else self.attention_dim

    def projection_shapes(self) -> dict[str, tuple[int, int]]:
        """``(out, in)`` of each Linear projection of one Llama-style block, by module name."""
        return {
            "q_proj": (self.q_dim, self.hidden),
            "k_proj": (self.kv_dim, self.hidden),
            "v_proj": (self.kv_dim, self.hidden),
            "o_proj": (self.hidden, self.q_dim),
            "gate_proj": (self.intermediate, self.hidden),
            "up_proj": (self.intermediate, self.hidden),
            "down_proj": (self.hidden, self.intermediate),
        }

    @classmethod
    def from_model_dir(cls, path: Path) -> ModelDims:
        """Read dimensions from ``config.json`` and parameter counts from the safetensors headers."""
        return cls.from_config(json.loads((path / "config.json").read_text()), count_params(path))

    @classmethod
    def from_config(cls, config: dict, num_params: int) -> ModelDims:
        """The dimensions in a transformers config (as a dict: ``config.json``, or ``PretrainedConfig.to_dict()``); a
        vision-language model's are its decoder's (``text_config``), its parameters the whole model's."""
        config = config.get("text_config") or config
        hidden = config["hidden_size"]
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or hidden // heads
        kv_heads = config.get("num_key_value_heads") or heads
        return cls(
            num_params=num_params,
            hidden=hidden,
            intermediate=config.get("intermediate_size", 4 * hidden),
            layers=config["num_hidden_layers"],
            kv_dim=kv_heads * head_dim,
            vocab=config["vocab_size"],
            attention_dim=heads * head_dim,
        )


def lora_parameter_count(m: ModelDims, r: int, target_modules: Sequence[str]) -> int:
    """LoRA adapter parameters on a Llama-style model: ``r · (in + out)`` per targeted projection and layer.

    A target may be a projection name (``q_proj``) or a dotted suffix ending in one (``self_attn.q_proj``);
    other names (another architecture's modules) raise ``ValueError``."""
    shapes = m.projection_shapes()
    unknown = sorted({t for t in target_modules if t.rsplit(".", 1)[-1] not in shapes})
    if unknown:
        raise ValueError(
            f"cannot size LoRA adapters on {unknown}: the planner knows the Llama-style projections {list(shapes)}"
        )
    names = {t.rsplit(".", 1)[-1] for t in target_modules}
    return m.layers * sum(r * (shapes[n][0] + shapes[n][1]) for n in names)


def count_params(path: Path) -> int:
    """Parameters of the model in ``path``: the element counts of every tensor in its safetensors headers."""
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
    group_size: int  # train.completions_per_prompt
    micro_batch_size: int
    shared_prefix: bool
    reference_model: bool
    compute_bytes: int = 4  # 2 under bf16 autocast
    bf16_generation_copy: bool = False  # rollout.bf16_weights
    packed_generation_copy: bool = False  # rollout.prepacked_weights without a bf16 copy: a copy in the model's dtype
    logits_chunk: int = DEFAULT_CHUNK_SIZE
    logit_cache_bytes: int = DEFAULT_CACHE_BYTES  # train.logit_cache_mb
    lora_params: int | None = None  # adapter parameters with model.lora (lora_parameter_count); None: full fine-tuning
    activation_checkpointing: bool = False  # train.activation_checkpointing: one hidden vector per layer and token
    bf16_moments: bool = False  # optim.state_dtype: bf16 (2 + 2 bytes of AdamW state per trained parameter)
    processes: int = 1  # ranks of a torchrun launch; the estimate is per rank
    strategy: str = "ddp"  # distributed.strategy when processes > 1: "ddp" | "fsdp2"
    reward_model_bytes: float = 0.0  # weights of the models rewards load (sequence_classifier, judge), every rank


def activation_bytes_per_token(m: ModelDims, compute_bytes: int, activation_checkpointing: bool) -> float:
    """Bytes of the training activations autograd keeps per token of a micro-batch (see the module docstring)."""
    per_token_layer = 8 * m.hidden + 2 * m.kv_dim + 4 * m.intermediate
    values = m.layers * m.hidden + per_token_layer if activation_checkpointing else m.layers * per_token_layer
    return float(values * compute_bytes)


def estimate_peak_bytes(m: ModelDims, r: RunShape) -> dict[str, float]:
    """Bytes of each resident component at the peak of a step (the training phase)."""
    if r.shared_prefix:
        groups = max(1, -(-r.micro_batch_size // r.group_size))
        tokens = groups * r.prompt_tokens + r.micro_batch_size * r.max_new_tokens
    else:
        tokens = r.micro_batch_size * (r.prompt_tokens + r.max_new_tokens)
    # this rank's rows: its share of whole groups
    rows = -(-r.prompts_per_step // max(r.processes, 1)) * r.group_size
    lora = r.lora_params is not None
    trained = r.lora_params if lora else m.num_params
    sharded = r.processes > 1 and r.strategy == "fsdp2"
    share = 1.0 / r.processes if sharded else 1.0  # the fraction of the model state a rank holds
    parts = {"policy weights (fp32)": 4.0 * m.num_params * share}
    if lora:
        parts["LoRA adapters (fp32)"] = 4.0 * trained * share
    parts |= {
        "gradients (fp32)": 4.0 * trained * share,
        f"AdamW moments ({'bf16' if r.bf16_moments else 'fp32'})": (4.0 if r.bf16_moments else 8.0) * trained * share,
        # with LoRA the reference policy is the same weights with the adapters disabled: no copy
        "reference model": 4.0 * m.num_params * share if r.reference_model and not lora else 0.0,
        "bf16 generation copy": 2.0 * m.num_params if r.bf16_generation_copy and not sharded else 0.0,
        "prepacked generation copy": (
            4.0 * m.num_params if r.packed_generation_copy and not r.bf16_generation_copy and not sharded else 0.0
        ),
        "activations (one micro-batch)": tokens * activation_bytes_per_token(
            m, r.compute_bytes, r.activation_checkpointing
        ),
        "generation KV cache": float(2 * m.layers * m.kv_dim * rows * (r.prompt_tokens + r.max_new_tokens) * r.compute_bytes),
    }
    cache = cache_bytes_needed(r.micro_batch_size * r.max_new_tokens, m.vocab)
    if cache <= r.logit_cache_bytes:
        parts["output-projection softmax cache"] = float(cache)
    else:
        parts["output-projection chunks"] = float(cache_bytes_needed(r.logits_chunk, m.vocab))
    # the frozen head of a LoRA model gets no gradient (the kernel skips it when the weight needs none); with one
    # process the head adds its gradient into .grad in place (only a bf16 product is a buffer of its own), with
    # several autograd carries a float32 [V, H] gradient (grove.kernels.output_projection)
    if lora:
        head_gradient = 0.0
    elif r.processes > 1:
        head_gradient = float(4 * m.vocab * m.hidden)
    else:
        head_gradient = float(r.compute_bytes * m.vocab * m.hidden) if r.compute_bytes < 4 else 0.0
    parts["output-projection gradient"] = head_gradient
    if r.processes > 1:  # rank 0 while writing a checkpoint: the gathered full weights and AdamW moments
        parts["checkpoint gather (rank 0)"] = 12.0 * trained + (4.0 * m.num_params if lora else 0.0)
    if sharded:
        parts["generation replica (full)"] = (2.0 if r.bf16_generation_copy else 4.0) * m.num_params
        layer = (m.num_params - m.vocab * m.hidden) / max(m.layers, 1)
        parts["gathered layers (2, with gradients)"] = 2 * 2 * 4.0 * layer
    if r.reward_model_bytes:  # each rank scores its own rows, with its own copy
        parts["reward models (weights)"] = float(r.reward_model_bytes)
    parts["total"] = sum(parts.values())
    return parts
