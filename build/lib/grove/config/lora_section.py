"""The ``model.lora`` section: LoRA adapters (via peft) instead of full fine-tuning.

Kept apart from :mod:`~grove.config.sections` so that :class:`LoraSettings` stays a leaf model (no import
cycle); :mod:`grove.models.lora` reads any object with the same four attributes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DEFAULT_TARGET_MODULES", "HEAD_MODULE_NAMES", "LoraSettings", "head_targets"]

DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
HEAD_MODULE_NAMES = ("lm_head",)


def head_targets(target_modules: list[str] | tuple[str, ...]) -> list[str]:
    """The entries of ``target_modules`` that name the output head (``lm_head``, ``model.lm_head``, ...)."""
    return [t for t in target_modules if t.rsplit(".", 1)[-1] in HEAD_MODULE_NAMES]


class LoraSettings(BaseModel):
    """LoRA hyper-parameters: ``W x + (alpha / r) · B A x`` on each targeted projection, ``A``: r×in, ``B``: out×r."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    r: int = Field(8, ge=1, description="Adapter rank r (A: r×in, B: out×r per targeted projection).")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha; the adapter output is scaled by alpha / r.")
    target_modules: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TARGET_MODULES),
        description="Names (or name suffixes) of the Linear modules that get adapters; default: every attention "
        "and MLP projection of a Llama-style block. The output head (lm_head) is not supported.",
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter's input (0 = off).")

    @field_validator("target_modules")
    @classmethod
    def _check_targets(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(
                "must name at least one module, e.g. [q_proj, k_proj, v_proj, o_proj] (or set model.lora: null for "
                "full fine-tuning)"
            )
        blank = [t for t in value if not t.strip()]
        if blank:
            raise ValueError("module names must be non-empty strings")
        head = head_targets(value)
        if head:
            raise ValueError(
                f"{head[0]!r} is the output projection, which grove fuses with the log-softmax (log-probs are "
                "computed from the head's weight directly by a hand-written kernel), so an adapter on the head is "
                "not supported; target the attention/MLP projections instead (q_proj, k_proj, v_proj, o_proj, "
                "gate_proj, up_proj, down_proj)"
            )
        return value
