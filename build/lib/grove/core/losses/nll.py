"""Negative log-likelihood: supervised fine-tuning's loss, per token."""

from __future__ import annotations

import torch

from grove.core import papers
from grove.core.losses.interface import PolicyLossInput, PolicyLossOutput
from grove.registry import POLICY_LOSSES


@POLICY_LOSSES.register(
    "nll",
    paper=papers.SFT,
    summary="Negative log-likelihood of the trained tokens (supervised fine-tuning; `grove sft`). Ignores advantages.",
    formula="-log pi(y_t | y_<t, x) on loss tokens",
    reference="TRL SFTTrainer's completion-only loss (cross-entropy on assistant tokens)",
)
def nll(inputs: PolicyLossInput, params: object) -> PolicyLossOutput:
    """``token_loss = -logprobs`` on the loss tokens, zero elsewhere: with the ``token_mean`` aggregation, the mean
    cross-entropy of the trained tokens (the SFT objective of InstructGPT's supervised stage, Ouyang et al. 2022).
    Advantages, old and reference log-probs are not read, so it is the same number on- or off-policy."""
    token_loss = torch.where(inputs.mask, -inputs.logprobs, torch.zeros_like(inputs.logprobs))
    return PolicyLossOutput(token_loss=token_loss)
