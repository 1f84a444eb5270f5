"""The packed training forward: one padding-free row per distinct prompt, holding the prompt and all its
responses back to back under a block attention mask, with values and gradients equal to the padded forward's."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from grove.core.segments import gather_rows
from grove.kernels.output_projection import DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_SIZE
from grove.models.packed_attention import packed_block_mask, resolve_packed_attention
from grove.models.padded_forward import decoder_backbone, logprobs_at_states, scored_tokens, token_inputs
from grove.models.shared_prefix_forward import first_rows

__all__ = ["PackedLayout", "pack_by_prefix", "policy_forward_packed", "supports_packing"]


@dataclass(frozen=True)
class PackedLayout:
    """Where every real token of a micro-batch sits in the packed rows of :func:`policy_forward_packed`.

    Row ``u`` holds the ``u``-th distinct prompt followed by all its responses back to back:
    ``[prompt_u | response_a | response_b | ...]``, right-padded to the longest row. ``segment`` is 0 on
    prompt tokens, ``i + 1`` on the tokens of response ``i`` and -1 on padding; ``predictor_row/col``
    give, for every real response token (row-major order of ``response_mask``), the packed position
    whose hidden state predicts it (the prompt's last token for a response's first token).
    """

    input_ids: Tensor  # [U, T]
    position_ids: Tensor  # [U, T]
    segment: Tensor  # [U, T]
    predictor_row: Tensor  # [num response tokens]
    predictor_col: Tensor  # [num response tokens]

    def attention_mask(self) -> Tensor:
        """``bool [U, 1, T, T]``: causal, and a response sees its prompt and itself, never its siblings.

        Padding queries attend to themselves only (so no softmax row is empty); nothing attends to padding.
        """
        t = self.segment.shape[1]
        idx = torch.arange(t, device=self.segment.device)
        causal = idx[None, :] <= idx[:, None]
        seg_q, seg_k = self.segment[:, :, None], self.segment[:, None, :]
        visible = causal & (seg_q >= 0) & (seg_k >= 0) & ((seg_k == 0) | (seg_k == seg_q))
        return (visible | torch.eye(t, dtype=torch.bool, device=idx.device))[:, None]


def pack_by_prefix(
    prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor, response_mask: Tensor, prefix_index: Tensor
) -> PackedLayout:
    """Lay a micro-batch out as one padding-free row per distinct prompt (vectorised, no per-sample loop).

    Rows with equal ``prefix_index`` must have identical prompts (:func:`shares_prefixes`); pass
    ``torch.arange(N)`` to give every sample its own row. Positions are those of the padded forward
    (``0 .. len(prompt) - 1`` for the prompt, continuing through each response).
    """
    _, inverse = torch.unique(prefix_index, return_inverse=True)
    first = first_rows(inverse)
    num_rows = len(first)
    p_mask = prompt_mask[first].bool()
    prompt_len = p_mask.sum(1)
    resp_mask = response_mask.bool()
    resp_len = resp_mask.sum(1)
    # offset of each response inside its row: prompt length + lengths of the earlier responses of its prompt
    order = torch.argsort(inverse, stable=True)
    sorted_len = resp_len[order]
    before_sorted = sorted_len.cumsum(0) - sorted_len
    per_row = torch.zeros(num_rows, dtype=resp_len.dtype, device=resp_len.device).index_add_(0, inverse, resp_len)
    row_start = per_row.cumsum(0) - per_row
    before = torch.empty_like(before_sorted).scatter_(0, order, before_sorted) - row_start[inverse]
    offset = prompt_len[inverse] + before
    width = int((prompt_len + per_row).max())
    device = prompt_ids.device
    input_ids = torch.zeros((num_rows, width), dtype=prompt_ids.dtype, device=device)
    position_ids = torch.zeros((num_rows, width), dtype=torch.long, device=device)
    segment = torch.full((num_rows, width), -1, dtype=torch.long, device=device)
    # prompt tokens: left-padded column c -> packed column (number of real tokens before it)
    pr, pc = p_mask.nonzero(as_tuple=True)
    dest = (p_mask.long().cumsum(1) - 1)[pr, pc]
    input_ids[pr, dest] = prompt_ids[first][pr, pc]
    position_ids[pr, dest] = dest
    segment[pr, dest] = 0
    # response tokens (row-major order of response_mask, the order the log-prob kernel uses)
    ri, rt = resp_mask.nonzero(as_tuple=True)
    row, col = inverse[ri], offset[ri] + rt
    input_ids[row, col] = response_ids[ri, rt]
    position_ids[row, col] = prompt_len[row] + rt
    segment[row, col] = ri + 1
    predictor_col = torch.where(rt == 0, prompt_len[row] - 1, col - 1)
    return PackedLayout(input_ids, position_ids, segment, row, predictor_col)


def supports_packing(model: nn.Module) -> bool:
    """Whether every attention layer is plain causal full attention (what the packed block mask assumes)."""
    config = getattr(model, "config", None)
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    sliding = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    return all(t == "full_attention" for t in layer_types) and not sliding


def policy_forward_packed(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    prefix_index: Tensor | None = None,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    scored_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    attention: str = "auto",
) -> tuple[Tensor, Tensor | None]:
    """:func:`policy_forward` on padding-free packed rows: each distinct prompt once, no padding compute.

    Each row holds one prompt and all its responses (:func:`pack_by_prefix`); a block attention mask
    lets a response see its prompt and its own earlier tokens only, and position ids restart at the
    end of the prompt for every response, so each token sees exactly the context (and position) it
    has in the padded forward: values and gradients equal :func:`policy_forward`'s up to float
    rounding (the prompt's gradients from all G responses sum in its single pass, as in the padded
    forward). ``prefix_index`` groups rows with identical prompts (the group index); ``None`` packs
    every sample in its own row. This removes both the repeated prompts (Prefix Grouper, "Efficient
    GRPO Training through Shared-Prefix Forward") and the padding of variable-length responses (the
    padding-free packing of verl's ``use_remove_padding``). ``attention`` (``train.packed_attention``,
    :func:`grove.models.packed_attention.resolve_packed_attention`) picks the kernel: ``flex`` runs flex attention
    under a ``BlockMask`` of the rows' segments (no attention across samples, no ``[T, T]`` mask; CUDA for
    gradients), ``dense_mask`` passes a dense boolean ``[T, T]`` mask per row; ``auto``: flex on CUDA where the
    model dispatches it. Models with sliding-window or non-causal layers are rejected.
    """
    if not supports_packing(model):
        raise NotImplementedError("policy_forward_packed supports full-attention causal models only")
    if prefix_index is None:
        prefix_index = torch.arange(prompt_ids.shape[0], device=prompt_ids.device)
    layout = pack_by_prefix(prompt_ids, prompt_mask, response_ids, response_mask, prefix_index)
    kernel = resolve_packed_attention(attention, model, layout.input_ids.device)
    mask = packed_block_mask(layout.segment) if kernel == "flex" else layout.attention_mask()
    backbone = decoder_backbone(model)
    hidden = backbone(
        **token_inputs(backbone, layout.input_ids),
        attention_mask=mask,
        position_ids=layout.position_ids,
        use_cache=False,
    ).last_hidden_state
    # a prompt's last state predicts the first token of each of its responses: repeated rows (see gather_rows)
    predictors = layout.predictor_row * hidden.shape[1] + layout.predictor_col  # row-major order of response_mask
    scored = scored_tokens(response_mask, scored_mask)
    if scored_mask is not None:
        predictors = predictors[scored[response_mask.bool()]]
    selected = gather_rows(hidden.flatten(0, 1), predictors)
    return logprobs_at_states(model, selected, response_ids, scored, temperature, with_entropy, chunk_size,
                              cache_bytes)
