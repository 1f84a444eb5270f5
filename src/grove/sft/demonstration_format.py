"""The demonstration file: one JSON object per line, one training sample each, in tokens and in text.

``grove demos`` writes these files (:mod:`grove.demos`); ``grove sft`` reads them (:mod:`grove.sft.data`) and trains
on exactly the tokens a rollout of the same actions would build (the prompt builder and chat template of the RL
rollouts, in the config's prompt mode). A row::

    {"prompt_ids": [...], "completion_ids": [...], "completion_mask": [1, 1, 0, ...],
     "tokenizer": "3f2a…", "prompt": "…", "completion": "…",
     "source": "frozenlake", "task_id": 12, "episode": 3, "turns": [0], "won": true}

* ``prompt_ids``: the context the policy generates from (never trained on);
* ``completion_ids``: what follows it in the sample: the policy's tokens (``completion_mask`` 1: trained on) and,
  for a conversation, the environment's tokens between turns (0: masked out of the loss, as in RL);
* ``tokenizer``: :func:`tokenizer_fingerprint` of the tokenizer that made the ids; ``grove sft`` refuses a file made
  with another tokenizer (the ids would mean other text);
* ``prompt`` / ``completion``: the same tokens decoded, for reading the file;
* ``pixels`` (a vision-language policy's sample whose ids hold image tokens): the safetensors file of the pixels
  those tokens stand for, relative to the demonstration file's folder (:mod:`grove.vision.pixel_files`);
* the rest: where the sample came from (``source``: the environment or task; ``task_id``: a *training* task, never
  a held-out one; ``episode``; ``turns``; ``won``: whether the episode succeeded). Extra keys are kept and ignored.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["DEMONSTRATION_KEYS", "DemonstrationRow", "tokenizer_fingerprint"]

#: the keys that mark a data row as a demonstration row (rather than chat ``messages`` or ``prompt``/``completion``)
DEMONSTRATION_KEYS = ("prompt_ids", "completion_ids", "completion_mask")


class DemonstrationRow(BaseModel):
    """One line of a demonstration file (see the module docstring)."""

    model_config = ConfigDict(extra="allow")

    prompt_ids: list[int] = Field(min_length=1)
    completion_ids: list[int] = Field(min_length=1)
    completion_mask: list[int]
    tokenizer: str
    prompt: str = ""
    completion: str = ""
    source: str = ""
    task_id: int | None = None
    episode: int | None = None
    turns: list[int] = Field(default_factory=list)
    won: bool | None = None
    pixels: str | None = None

    @model_validator(mode="after")
    def _aligned(self) -> DemonstrationRow:
        if len(self.completion_mask) != len(self.completion_ids):
            raise ValueError(
                f"completion_mask has {len(self.completion_mask)} entries for {len(self.completion_ids)} completion_ids"
            )
        if any(m not in (0, 1) for m in self.completion_mask):
            raise ValueError("completion_mask entries must be 0 or 1")
        if not any(self.completion_mask):
            raise ValueError("completion_mask trains on no token (every entry is 0)")
        return self


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of what decides a tokenizer's ids: its vocabulary (token → id) and its chat template."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    template = getattr(tokenizer, "chat_template", None) or ""
    payload = json.dumps([vocab, template], ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(payload).hexdigest()[:16]
