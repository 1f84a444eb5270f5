"""The ``train.forward`` layouts (``packed``, ``shared_prefix``, ``padded``) as one call on a bare causal LM:
:func:`layout_logprobs` scores a :class:`grove.batch.RolloutBatch` with the layout named in the config. A batch whose
prompts hold images always runs padded, its pixels passed to the multimodal model (said once in the log)."""

from __future__ import annotations

import logging

from torch import Tensor, nn

from grove.batch import RolloutBatch
from grove.models.packed_forward import policy_forward_packed, supports_packing
from grove.models.padded_forward import policy_forward
from grove.models.shared_prefix_forward import (
    forward_with_shared_prefixes,
    policy_forward_shared_prefix,
    shared_prefixes,
    shares_prefixes,
)

__all__ = ["FORWARD_LAYOUTS", "layout_logprobs"]

logger = logging.getLogger(__name__)


def _policy_tokens(mb: RolloutBatch) -> Tensor | None:
    """The tokens a batch's forward scores: the policy's own (an agent sample's environment tokens are context)."""
    return None if mb.token_steps is None else mb.policy_token_mask


def _packed(model, mb, packed_attention="auto", **kw):
    args = (mb.prompt_ids, mb.prompt_mask, mb.response_ids, mb.response_mask)
    if shares_prefixes(mb.prompt_ids, mb.prompt_mask, mb.group_index):
        return policy_forward_packed(model, *args, mb.group_index, scored_mask=_policy_tokens(mb),
                                     attention=packed_attention, **kw)
    # prompts that differ within a group (an agent's per-step prompts share only the instructions): run each group's
    # common leading tokens once when that runs fewer positions than packing every sample on its own
    groups = shared_prefixes(mb.prompt_ids, mb.prompt_mask, mb.group_index)
    alone = int(mb.prompt_mask.sum()) + int(mb.response_mask.sum())
    fanned = groups.positions_run + mb.response_ids.shape[0] * int(mb.response_mask.sum(1).max())
    if int(groups.shared.min()) >= 1 and fanned < alone:
        return forward_with_shared_prefixes(model, groups, mb.response_ids, mb.response_mask,
                                             scored_mask=_policy_tokens(mb), **kw)
    return policy_forward_packed(model, *args, None, scored_mask=_policy_tokens(mb), attention=packed_attention, **kw)


def _shared_prefix(model, mb, packed_attention="auto", **kw):
    args = (mb.prompt_ids, mb.prompt_mask, mb.response_ids, mb.response_mask)
    return policy_forward_shared_prefix(model, *args, mb.group_index, scored_mask=_policy_tokens(mb), **kw)


def _padded(model, mb, packed_attention="auto", **kw):
    args = (mb.prompt_ids, mb.prompt_mask, mb.response_ids, mb.response_mask)
    return policy_forward(model, *args, scored_mask=_policy_tokens(mb), **kw)


FORWARD_LAYOUTS = {"packed": _packed, "shared_prefix": _shared_prefix, "padded": _padded}


def layout_logprobs(model: nn.Module, batch: RolloutBatch, layout: str = "packed", **kwargs) -> tuple[Tensor, Tensor | None]:
    """:func:`response_logprobs` on a bare causal LM (what :class:`ResponseLogprobModule` runs in its forward).
    ``packed_attention`` (``train.packed_attention``, default ``auto``) picks the packed rows' attention kernel;
    the other layouts ignore it."""
    if layout not in FORWARD_LAYOUTS:
        raise ValueError(f"unknown training-forward layout {layout!r}; choose one of {sorted(FORWARD_LAYOUTS)}")
    images = getattr(batch, "images", None)  # a batch-like object without images: text
    if images is not None:
        if layout != "padded" and not _told_padded:
            _told_padded.append(layout)
            logger.info("train.forward %s: prompts with images run padded (image features replace the image tokens "
                        "in whole padded rows; packing and shared prefixes do not carry pixels)", layout)
        args = (batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
        kwargs.pop("packed_attention", None)
        return policy_forward(model, *args, scored_mask=_policy_tokens(batch), images=images, **kwargs)
    if layout == "packed" and not supports_packing(model):
        layout = "shared_prefix"  # sliding-window models: the KV fan-out keeps the model's own masking
    return FORWARD_LAYOUTS[layout](model, batch, **kwargs)


_told_padded: list[str] = []  # the padded fallback for image prompts is said once per process
