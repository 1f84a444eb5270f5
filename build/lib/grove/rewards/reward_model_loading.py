"""What the rewards computed by a model (``sequence_classifier``, ``judge``) share: their common parameters, where
the model runs and in which precision, the text a prompt and a completion become, tokenising with truncation
counted, padding, and the once-per-process cache of loaded models.

A model is loaded at the first call of the reward in a process (the trainer's, or the reward's worker under
``isolation: process``, which gets the registered function and its parameters, pickled by reference) and kept for
the life of that process, keyed by its directory, device and precision. Nothing is downloaded: every load is
``local_files_only``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ModelRewardParams",
    "TruncationCount",
    "cached_model",
    "model_config_json",
    "pad_rows",
    "prompt_messages",
    "prompt_text",
    "resolve_device",
    "reward_model_text",
    "tokenize_rows",
    "torch_dtype",
    "with_system_prompt",
]

log = logging.getLogger("grove.rewards")

Device = Literal["auto", "cpu", "cuda"]
Precision = Literal["fp32", "bf16"]
InputFormat = Literal["auto", "chat_template", "plain"]

_BYTES_PER_PARAM = {"fp32": 4, "bf16": 2}


class ModelRewardParams(BaseModel):
    """The parameters every model-backed reward takes (besides ``model``, which each checks in its own way)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="The model: a local transformers model directory.")
    device: Device = Field(
        "auto",
        description="Where the model runs: 'auto' (the GPU the process uses, i.e. the policy's, when there is one; "
        "else the CPU), 'cpu' or 'cuda'.",
    )
    precision: Precision = Field("fp32", description="Dtype of the model's weights: 'fp32' or 'bf16'.")
    batch_size: int = Field(8, ge=1, description="Samples per forward pass.")
    max_length: int | None = Field(
        None,
        ge=1,
        description="Longest input in tokens; longer ones are truncated (counted and logged). null: the model's "
        "context (the smaller of its tokenizer's model_max_length and its max_position_embeddings).",
    )
    truncation_side: Literal["left", "right"] = Field(
        "left",
        description="Which end of a too-long input is cut: 'left' keeps the end (where the completion ends and "
        "the model reads its score), 'right' keeps the beginning.",
    )
    format: InputFormat = Field(
        "auto",
        description="How a prompt and a completion become the model's input: 'chat_template' (the tokenizer's chat "
        "template, a required one), 'plain' (text, see the reward's page), 'auto' (the chat template when the "
        "tokenizer has one, else plain).",
    )

    def model_directory(self) -> Path:
        """The model's local directory (an embedded model is converted into the grove cache when needed)."""
        return Path(self.model).expanduser().resolve()

    def model_bytes(self) -> int:
        """Bytes of the model's weights in its precision: parameters (safetensors headers) × 4 (fp32) or 2 (bf16)."""
        from grove.infra.memory_plan import count_params

        return count_params(self.model_directory()) * _BYTES_PER_PARAM[self.precision]


def model_config_json(path: str | Path) -> dict[str, Any]:
    """``path/config.json`` as a dict (raises ``ValueError`` naming the file when it is missing or not JSON)."""
    config_path = Path(path).expanduser() / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{config_path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {config_path} ({type(exc).__name__}: {exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} must be a JSON object, got a {type(config).__name__}")
    return config


def check_model_directory(value: str, what: str) -> str:
    """``value`` if it names a local model directory (with ``config.json``); else ``ValueError`` saying what to set."""
    path = Path(value).expanduser()
    if not path.exists():
        raise ValueError(f"{what} {value!r} does not exist; set it to a local transformers model directory")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ValueError(f"{what} {value!r} is not a transformers model directory (no config.json in it)")
    return value


def resolve_device(device: Device) -> Any:
    """The ``torch.device`` a reward model runs on: ``auto`` is the current CUDA device when CUDA is available (the
    one the policy of this process uses; a reward worker inherits ``LOCAL_RANK``), else the CPU."""
    import torch

    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("device: cuda, but CUDA is not available in this process; set device: auto or cpu")
    local_rank = os.environ.get("LOCAL_RANK")
    index = int(local_rank) if local_rank is not None and local_rank.isdigit() else torch.cuda.current_device()
    return torch.device("cuda", index % torch.cuda.device_count())


def torch_dtype(precision: Precision) -> Any:
    import torch

    return torch.bfloat16 if precision == "bf16" else torch.float32


def prompt_messages(prompt: Any) -> list[dict[str, str]]:
    """A prompt as chat messages: a string is one user message; a list of ``{role, content}`` dicts stays as is."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list | tuple) and all(isinstance(m, dict) and "content" in m for m in prompt):
        return [{"role": str(m.get("role", "user")), "content": str(m["content"])} for m in prompt]
    raise TypeError(f"a prompt must be a string or a list of chat messages ({{role, content}}), got {prompt!r:.200}")


def prompt_text(prompt: Any) -> str:
    """A prompt as plain text: a string as is; the content of a lone message; else ``role: content`` lines."""
    if isinstance(prompt, str):
        return prompt
    messages = prompt_messages(prompt)
    if len(messages) == 1:
        return messages[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def reward_model_text(tokenizer: Any, prompt: Any, completion: str) -> str:
    """The text a ``grove rm`` reward model scores, in training (:mod:`grove.rm.examples`) and as the
    ``sequence_classifier`` reward: the prompt's messages and the completion as an assistant message, rendered with
    the tokenizer's chat template (no generation prompt, no special tokens added); without a chat template, a string
    prompt followed by the completion. Raises ``ValueError`` for chat messages without a chat template."""
    if getattr(tokenizer, "chat_template", None):
        messages = [*prompt_messages(prompt), {"role": "assistant", "content": completion}]
        return tokenizer.apply_chat_template(messages, tokenize=False)
    if not isinstance(prompt, str):
        raise ValueError("chat messages need a chat template: give the prompt as a string, or use a model whose "
                         "tokenizer has a chat template")
    return prompt + completion


def with_system_prompt(prompt: Any, system_prompt: str | None) -> Any:
    """``prompt`` as the policy saw it: ``system_prompt`` (``rollout.system_prompt``) first, unless the prompt's
    messages already open with a system message."""
    if system_prompt is None:
        return prompt
    messages = prompt_messages(prompt)
    if messages and messages[0]["role"] == "system":
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]


def uses_chat_template(tokenizer: Any, format: InputFormat, what: str) -> bool:
    """Whether inputs go through the tokenizer's chat template (``format``; ``chat_template`` needs one)."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if format == "chat_template" and not has_template:
        raise ValueError(f"{what}: format chat_template, but the tokenizer has no chat template; use format: plain")
    return format == "chat_template" or (format == "auto" and has_template)


class TruncationCount:
    """Samples whose input was longer than ``max_length`` (cut to it): counted per loaded model; the first batch with
    one logs a warning, later ones an info line with the running total."""

    def __init__(self, what: str, max_length: int, side: str) -> None:
        self.what, self.max_length, self.side = what, max_length, side
        self.truncated = 0
        self.seen = 0

    def add(self, truncated: int, total: int) -> None:
        first = truncated and not self.truncated
        self.truncated += truncated
        self.seen += total
        if first:
            log.warning(
                "%s: %d of %d inputs are longer than max_length=%d tokens and were truncated (their %s end cut); "
                "later truncations are counted (%s). Raise max_length, or shorten rollout.max_new_tokens",
                self.what, truncated, total, self.max_length, self.side, "logged at INFO on grove.rewards",
            )
        elif truncated:
            log.info("%s: %d of %d inputs truncated (%d of %d so far)", self.what, truncated, total,
                     self.truncated, self.seen)


def tokenize_rows(
    tokenizer: Any, texts: Sequence[str], *, add_special_tokens: bool, max_length: int, side: str
) -> tuple[list[list[int]], int]:
    """Token ids of each text, cut to ``max_length`` on ``side`` (``left``: the end kept); and how many were cut."""
    rows = tokenizer(list(texts), add_special_tokens=add_special_tokens, truncation=False)["input_ids"]
    cut = sum(len(r) > max_length for r in rows)
    if cut:
        rows = [r[-max_length:] if side == "left" else r[:max_length] for r in rows]
    return rows, cut


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, side: str) -> tuple[Any, Any]:
    """``input_ids`` and ``attention_mask`` ``[B, T]`` of token rows padded with ``pad_id`` on ``side``."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    flat = torch.tensor([t for r in rows for t in r], dtype=torch.long)
    positions = torch.arange(width).expand(len(rows), width)
    keep = positions >= (width - lengths)[:, None] if side == "left" else positions < lengths[:, None]
    ids[keep] = flat
    mask[keep] = 1
    return ids, mask


def context_length(tokenizer: Any, config: Any, max_length: int | None) -> int:
    """``max_length``, or the model's context: the smaller of the tokenizer's ``model_max_length`` (when it states
    one) and the config's ``max_position_embeddings``."""
    if max_length is not None:
        return max_length
    limits = [getattr(config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    known = [int(x) for x in limits if isinstance(x, int) and 0 < x < 10**7]
    return min(known) if known else 2048


T = TypeVar("T")

_LOADED: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


def cached_model(key: tuple[Any, ...], load: Callable[[], T]) -> T:
    """The object ``load()`` returns, built once per process for ``key`` (a model's directory, device, precision)."""
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = load()
        return _LOADED[key]


def forget_loaded_models() -> None:
    """Drop every cached model of this process (tests; a later call loads again)."""
    with _LOCK:
        _LOADED.clear()
