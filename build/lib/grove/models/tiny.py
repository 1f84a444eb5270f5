"""A tiny random decoder directory (Llama by default; Mistral, Qwen2 or Qwen3 on request) with a self-contained
ChatML tokenizer, for tests (offline, < 2 s).

The tokenizer is a byte-level BPE trained on a small built-in corpus (so every string is encodable and tokens
span several characters), with the special tokens ``<|pad|>`` (id 0), ``<|im_start|>`` (id 1) and
``<|im_end|>`` (id 2, the eos token), and a SmolLM2-style ChatML chat template.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    MistralConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
)

__all__ = ["ARCHITECTURES", "CHATML_TEMPLATE", "TINY_SPECIAL_TOKENS", "create_tiny_model_dir", "build_tiny_tokenizer"]

# the configuration class of each architecture a tiny model may have; qwen2 has biased q/k/v projections, qwen3 a
# per-head RMSNorm of queries and keys
ARCHITECTURES = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}

TINY_SPECIAL_TOKENS = ("<|pad|>", "<|im_start|>", "<|im_end|>")

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 12 + 7? The answer is 19.",
    "Question: how many apples are left? Answer: 3",
    "Let me think step by step. First, add the numbers. Then, divide by two.",
    "<think> reasoning </think> <answer> 42 </answer>",
    "system user assistant You are a helpful assistant.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000",
    "def f(x):\n    return x * 2\n",
    "Solve for x: 2x + 3 = 11, so x = 4. \\boxed{4}",
] * 4


def build_tiny_tokenizer(vocab_size: int = 384) -> PreTrainedTokenizerFast:
    """A deterministic byte-level BPE tokenizer with ChatML special tokens and chat template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(TINY_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    pad, im_start, im_end = TINY_SPECIAL_TOKENS
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=im_end,
        pad_token=pad,
        unk_token=None,
        additional_special_tokens=[im_start],
        chat_template=CHATML_TEMPLATE,
        padding_side="left",
        model_max_length=512,
    )


def create_tiny_model_dir(
    path: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 384,
    max_position_embeddings: int = 512,
    initializer_range: float = 0.02,
    tie_word_embeddings: bool = True,
    architecture: str = "llama",
) -> Path:
    """Write a randomly initialised causal LM of ``architecture`` (:data:`ARCHITECTURES`; ``LlamaForCausalLM`` by
    default) and its tokenizer to ``path`` and return it.

    The directory is loadable with :func:`grove.models.pretrained.load_policy`. Initialisation is seeded by
    ``seed`` without touching the global RNG. A larger ``initializer_range`` gives peakier distributions.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(vocab_size)
    tokenizer.model_max_length = max_position_embeddings  # the tokenizer states the context the model has
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    config = ARCHITECTURES[architecture](
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        initializer_range=initializer_range,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        rms_norm_eps=1e-6,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
