"""One demonstration row (:class:`grove.sft.demonstration_format.DemonstrationRow`) from a training sample's tokens."""

from __future__ import annotations

from typing import Any

from grove.experience.episode_records import SampleTokens
from grove.sft.demonstration_format import DemonstrationRow

__all__ = ["action_ids", "demonstration_row"]


def action_ids(tokenizer: Any, text: str) -> list[int]:
    """The token ids a rollout samples for ``text``: its tokens (no special tokens added), then the end-of-sequence
    token the model stops on (a rollout's response keeps it, :class:`grove.rollout.engine.RolloutOutput`)."""
    eos = tokenizer.eos_token_id
    if not isinstance(eos, int):
        raise ValueError(
            "the tokenizer has no single end-of-sequence token (eos_token_id is "
            f"{eos!r}); demonstrations end each reply with it, as a rollout's model stops on it"
        )
    return [*tokenizer(text, add_special_tokens=False)["input_ids"], eos]


def demonstration_row(
    sample: SampleTokens, tokenizer: Any, fingerprint: str, *, source: str, task_id: int, episode: int,
    won: bool, **extra: Any,
) -> dict[str, Any]:
    """The JSON object of one sample: its ids, its trained-token mask (1 on the policy's tokens, 0 on the
    environment's), the decoded text, where it came from and ``extra`` keys; validated as a
    :class:`DemonstrationRow`."""
    row = {
        "prompt_ids": list(sample.prompt_ids),
        "completion_ids": list(sample.response_ids),
        "completion_mask": [1 if t >= 0 else 0 for t in sample.token_turns],
        "tokenizer": fingerprint,
        "prompt": tokenizer.decode(sample.prompt_ids, skip_special_tokens=False),
        "completion": tokenizer.decode(sample.response_ids, skip_special_tokens=False),
        "source": source,
        "task_id": task_id,
        "episode": episode,
        "turns": sample.turns,
        "won": won,
        **extra,
    }
    DemonstrationRow.model_validate(row)
    return row
