"""Per-token log-probs (and entropies) of response tokens under a causal LM, in rollout-batch layout.

The model sees ``prompt (left-padded) + response (right-padded)`` with ``position_ids = cumsum(mask) - 1``
clamped at 0: exactly the positions the rollout engine used, so log-probs match the sampler's. Only the
hidden states that predict response tokens (sequence positions ``P-1 .. P+R-2``) and only real (unpadded)
response tokens go through the output projection, via the chunked
:func:`grove.core.output_projection.token_logprobs_and_entropy`, so no ``[N, P+R, V]`` logits tensor ever exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from grove.batch import RolloutBatch
from grove.core.output_projection import DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_SIZE, token_logprobs_and_entropy
from grove.core.segments import gather_rows
from grove.core.token_embedding import embed_tokens

__all__ = [
    "FORWARD_LAYOUTS",
    "PackedLayout",
    "decoder_backbone",
    "pack_by_prefix",
    "policy_forward",
    "policy_forward_packed",
    "policy_forward_shared_prefix",
    "response_logprobs",
    "shared_prefixes",
    "shares_prefixes",
    "supports_packing",
    "token_inputs",
]


def decoder_backbone(model: nn.Module) -> nn.Module:
    """The decoder a causal LM's (or a peft model's) training forward runs: ``get_decoder()``, else ``.model``."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None or decoder is model:
        decoder = getattr(model, "model", None)
    if decoder is None:
        raise TypeError(f"cannot find the decoder backbone of {type(model).__name__}")
    return decoder


def token_inputs(backbone: nn.Module, input_ids: Tensor) -> dict[str, Tensor]:
    """The backbone's token inputs: ``inputs_embeds`` from :func:`grove.core.token_embedding.embed_tokens` (in the
    single-process update its weight gradient goes into ``.grad`` in place, with no ``[V, H]`` buffer per
    micro-batch) where the input embedding is a plain ``nn.Embedding`` (no ``max_norm``, frequency scaling or sparse
    gradients; a subclass may scale or transform its rows), else ``input_ids`` for the model's own lookup."""
    embedding = backbone.get_input_embeddings() if hasattr(backbone, "get_input_embeddings") else None
    plain = (
        type(embedding) is nn.Embedding
        and embedding.max_norm is None
        and not embedding.scale_grad_by_freq
        and not embedding.sparse
    )
    if not plain:
        return {"input_ids": input_ids}
    return {"inputs_embeds": embed_tokens(embedding.weight, input_ids, embedding.padding_idx)}


def policy_forward(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    scored_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> tuple[Tensor, Tensor | None]:
    """``(logprobs [N, R], entropy [N, R] or None)`` of the response tokens, float32, zeros at response pads.

    Works with grad (policy update) and under ``torch.no_grad()`` (reference / old-policy log-probs).
    ``temperature`` must be the sampling temperature for the log-probs to be those of the sampled policy.
    ``scored_mask`` (``[N, R]``, within ``response_mask``; default: all of it): the response tokens whose
    log-probs and entropies are computed, the others read as context only and get 0 (an agent sample's
    environment tokens: the output projection over the vocabulary is a fifth of a small model's per-token cost).
    Models whose logits are not ``final_hidden @ lm_head.weight.T (+ bias)`` (logit soft-capping or scaling)
    are rejected.
    """
    config = getattr(model, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        if getattr(config, attr, None) not in (None, 1, 1.0):
            raise NotImplementedError(f"policy_forward does not support models with {attr}")
    n, p = prompt_ids.shape
    r = response_ids.shape[1]
    if p < 1:
        raise ValueError("policy_forward needs at least one prompt column")
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1).long()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    backbone = decoder_backbone(model)
    hidden = backbone(
        **token_inputs(backbone, input_ids), attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state
    hidden = hidden[:, p - 1 : p + r - 1]  # the state at position t predicts token t + 1
    scored = _scored(response_mask, scored_mask)
    selected = hidden[scored]  # the states that predict the scored response tokens
    return _selected_logprobs(model, selected, response_ids, scored, temperature, with_entropy, chunk_size,
                              cache_bytes)


def _scored(response_mask: Tensor, scored_mask: Tensor | None) -> Tensor:
    """``bool [N, R]``: the response tokens to compute log-probs for (``scored_mask`` within ``response_mask``)."""
    keep = response_mask.bool()
    return keep if scored_mask is None else keep & scored_mask.bool()


def _selected_logprobs(
    model: nn.Module,
    hidden: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    with_entropy: bool,
    chunk_size: int,
    cache_bytes: int,
) -> tuple[Tensor, Tensor | None]:
    """``[N, R]`` log-probs/entropies from the predicting states of the scored response tokens (``response_mask``
    here: the tokens to score), ``hidden [num tokens, H]`` in row-major order of that mask; 0 elsewhere."""
    n, r = response_ids.shape
    keep = response_mask.bool()
    head = model.get_output_embeddings()
    logp, entropy = token_logprobs_and_entropy(
        hidden,
        head.weight,
        response_ids[keep],
        temperature=temperature,
        chunk_size=chunk_size,
        cache_bytes=cache_bytes,
        with_entropy=with_entropy,
        bias=getattr(head, "bias", None),
    )
    zeros = torch.zeros((n, r), dtype=torch.float32, device=logp.device)
    logp_full = zeros.masked_scatter(keep, logp)
    entropy_full = zeros.masked_scatter(keep, entropy) if entropy is not None else None
    return logp_full, entropy_full


def shares_prefixes(prompt_ids: Tensor, prompt_mask: Tensor, prefix_index: Tensor) -> bool:
    """Whether all rows with the same ``prefix_index`` really have the same (padded) prompt."""
    _, inverse = torch.unique(prefix_index, return_inverse=True)
    first = _first_rows(inverse)
    return bool((prompt_ids == prompt_ids[first][inverse]).all() and (prompt_mask == prompt_mask[first][inverse]).all())


def _first_rows(inverse: Tensor) -> Tensor:
    rows = torch.arange(len(inverse), device=inverse.device)
    count = int(inverse.max()) + 1
    return torch.full((count,), len(inverse), device=inverse.device).scatter_reduce(0, inverse, rows, "amin")


def _fan_out_cache(cache, rows: Tensor) -> None:
    """Repeat the cache rows ``rows`` of every layer in place (:func:`gather_rows`, so the gradients of a prompt's
    keys and values sum over its responses in a fixed order); layers that are not plain key/value tensors select
    with their own ``batch_select_indices``. The decode loop's no-grad counterpart is
    ``grove.rollout.decode_cache.select_cache_rows`` (the rollout package imports no other grove package)."""
    from transformers.cache_utils import DynamicLayer

    for layer in cache.layers:
        if type(layer) is DynamicLayer and getattr(layer, "is_initialized", False):
            layer.keys, layer.values = gather_rows(layer.keys, rows), gather_rows(layer.values, rows)
        else:
            layer.batch_select_indices(rows)


@dataclass(frozen=True)
class SharedPrefixes:
    """How the prompts of a micro-batch split into a part shared within each prefix group and a remainder.

    ``inverse [N]``: each row's group; ``first [U]``: each group's first row; ``shared [U]``: how many leading
    prompt tokens all rows of the group have in common, at most the group's shortest prompt less one (so every
    row keeps at least its last prompt token, whose state predicts its first response token); ``aligned
    [N, P]``: the prompts left-aligned; ``lengths [N]``: the prompt lengths.
    """

    inverse: Tensor
    first: Tensor
    shared: Tensor
    aligned: Tensor
    lengths: Tensor

    @property
    def positions_run(self) -> int:
        """Prompt positions the shared-prefix forward runs: each group's prefix once, every row's remainder padded
        to the longest remainder."""
        remainder = self.lengths - self.shared[self.inverse]
        return int(self.shared.sum()) + len(self.lengths) * int(remainder.max())


def shared_prefixes(prompt_ids: Tensor, prompt_mask: Tensor, prefix_index: Tensor) -> SharedPrefixes:
    """The common leading prompt tokens of each group of rows with equal ``prefix_index`` (vectorised)."""
    mask = prompt_mask.bool()
    lengths = mask.sum(1)
    width = prompt_ids.shape[1]
    column = torch.arange(width, device=prompt_ids.device)[None, :]
    aligned = prompt_ids.gather(1, (column + width - lengths[:, None]).clamp(max=width - 1))
    valid = column < lengths[:, None]
    _, inverse = torch.unique(prefix_index, return_inverse=True)
    first = _first_rows(inverse)
    same = (aligned == aligned[first][inverse]) & valid & valid[first][inverse]
    common = same.long().cumprod(1).sum(1)  # each row's common prefix with its group's first row
    limit = torch.minimum(common, lengths - 1)
    shared = torch.full((len(first),), width, dtype=limit.dtype, device=limit.device)
    shared = shared.scatter_reduce(0, inverse, limit, "amin")
    return SharedPrefixes(inverse, first, shared, aligned, lengths)


def policy_forward_shared_prefix(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    prefix_index: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    scored_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> tuple[Tensor, Tensor | None]:
    """:func:`policy_forward` computing the prompt tokens a group of rows shares once (the Prefix Grouper idea).

    Rows with equal ``prefix_index`` are a group; the leading tokens all its prompts have in common
    (:func:`shared_prefixes`: the whole prompt but its last token when the prompts are identical, e.g. the G
    completions of one prompt; the instructions when they differ after them, e.g. an agent's per-step prompts)
    go through the model once, and their key/value cache is fanned out to every row (an indexing op, so the
    gradients from all rows flow back into the one prefix pass and sum there, as in the padded forward). Each
    row then runs the rest of its prompt (left-padded) and its response against that cache. Positions are the
    padded forward's, so values and gradients equal :func:`policy_forward`'s up to float rounding. With prompts
    ~4× longer than the answers and G = 8 this cuts the forward/backward FLOPs ~3×. (Prefix Grouper: "Efficient
    GRPO Training through Shared-Prefix Forward".) When some group shares no token (one-token prompts), the
    padded forward runs instead.
    """
    groups = shared_prefixes(prompt_ids, prompt_mask, prefix_index)
    kw = {"temperature": temperature, "with_entropy": with_entropy, "scored_mask": scored_mask,
          "chunk_size": chunk_size, "cache_bytes": cache_bytes}
    if int(groups.shared.min()) < 1:
        return policy_forward(model, prompt_ids, prompt_mask, response_ids, response_mask, **kw)
    return _forward_with_shared_prefixes(model, groups, response_ids, response_mask, **kw)


def _left_padded(aligned: Tensor, start: Tensor, count: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Tokens ``start[i] .. start[i] + count[i] - 1`` of each left-aligned row of ``aligned``, left-padded to the
    largest count: ``(ids with 0 on pads, bool mask, source column of each position)``."""
    width = int(count.max())
    column = torch.arange(width, device=aligned.device)[None, :]
    offset = width - count[:, None]
    mask = column >= offset
    source = (start[:, None] + column - offset).clamp(min=0, max=aligned.shape[1] - 1)
    return aligned.gather(1, source).masked_fill(~mask, 0), mask, source


def _forward_with_shared_prefixes(
    model: nn.Module, groups: SharedPrefixes, response_ids: Tensor, response_mask: Tensor, *,
    temperature: float = 1.0, with_entropy: bool = False, scored_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE, cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> tuple[Tensor, Tensor | None]:
    """:func:`policy_forward_shared_prefix` once the groups (each sharing at least one token) are known."""
    from transformers import DynamicCache

    inverse, shared = groups.inverse, groups.shared
    # the shared prefixes: group u's tokens 0 .. shared[u] - 1, at positions 0 .. shared[u] - 1
    prefix_ids, prefix_mask, prefix_positions = _left_padded(groups.aligned[groups.first], torch.zeros_like(shared),
                                                             shared)
    backbone = decoder_backbone(model)
    cache = DynamicCache(config=model.config)
    backbone(
        **token_inputs(backbone, prefix_ids), attention_mask=prefix_mask.long(), position_ids=prefix_positions,
        past_key_values=cache, use_cache=True,
    )
    _fan_out_cache(cache, inverse)  # each group's keys/values, once per row
    # each row's remaining prompt tokens (at least one), then its response
    row_shared = shared[inverse]
    rest_ids, rest_mask, _ = _left_padded(groups.aligned, row_shared, groups.lengths - row_shared)
    tail_mask = torch.cat([rest_mask.long(), response_mask.long()], dim=1)
    out = backbone(
        **token_inputs(backbone, torch.cat([rest_ids, response_ids], dim=1)),
        attention_mask=torch.cat([prefix_mask.long()[inverse], tail_mask], dim=1),
        position_ids=row_shared[:, None] + (tail_mask.cumsum(-1) - 1).clamp(min=0),
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state
    rest_width, r = rest_ids.shape[1], response_ids.shape[1]
    hidden = out[:, rest_width - 1 : rest_width + r - 1]  # the state at position t predicts token t + 1
    scored = _scored(response_mask, scored_mask)
    selected = hidden[scored]  # the states that predict the scored response tokens
    return _selected_logprobs(model, selected, response_ids, scored, temperature, with_entropy, chunk_size,
                              cache_bytes)


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
    first = _first_rows(inverse)
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
    padding-free packing of verl's ``use_remove_padding``), at the cost of a dense ``[T, T]`` mask per
    row. Models with sliding-window or non-causal layers are rejected.
    """
    if not supports_packing(model):
        raise NotImplementedError("policy_forward_packed supports full-attention causal models only")
    if prefix_index is None:
        prefix_index = torch.arange(prompt_ids.shape[0], device=prompt_ids.device)
    layout = pack_by_prefix(prompt_ids, prompt_mask, response_ids, response_mask, prefix_index)
    backbone = decoder_backbone(model)
    hidden = backbone(
        **token_inputs(backbone, layout.input_ids),
        attention_mask=layout.attention_mask(),
        position_ids=layout.position_ids,
        use_cache=False,
    ).last_hidden_state
    # a prompt's last state predicts the first token of each of its responses: repeated rows (see gather_rows)
    predictors = layout.predictor_row * hidden.shape[1] + layout.predictor_col  # row-major order of response_mask
    scored = _scored(response_mask, scored_mask)
    if scored_mask is not None:
        predictors = predictors[scored[response_mask.bool()]]
    selected = gather_rows(hidden.flatten(0, 1), predictors)
    return _selected_logprobs(model, selected, response_ids, scored, temperature, with_entropy, chunk_size,
                              cache_bytes)


def _policy_tokens(mb: RolloutBatch) -> Tensor | None:
    """The tokens a batch's forward scores: the policy's own (an agent sample's environment tokens are context)."""
    return None if mb.token_steps is None else mb.policy_token_mask


def _packed(model, mb, **kw):
    args = (mb.prompt_ids, mb.prompt_mask, mb.response_ids, mb.response_mask)
    if shares_prefixes(mb.prompt_ids, mb.prompt_mask, mb.group_index):
        return policy_forward_packed(model, *args, mb.group_index, scored_mask=_policy_tokens(mb), **kw)
    # prompts that differ within a group (an agent's per-step prompts share only the instructions): run each group's
    # common leading tokens once when that runs fewer positions than packing every sample on its own
    groups = shared_prefixes(mb.prompt_ids, mb.prompt_mask, mb.group_index)
    alone = int(mb.prompt_mask.sum()) + int(mb.response_mask.sum())
    fanned = groups.positions_run + mb.response_ids.shape[0] * int(mb.response_mask.sum(1).max())
    if int(groups.shared.min()) >= 1 and fanned < alone:
        return _forward_with_shared_prefixes(model, groups, mb.response_ids, mb.response_mask,
                                             scored_mask=_policy_tokens(mb), **kw)
    return policy_forward_packed(model, *args, None, scored_mask=_policy_tokens(mb), **kw)


def _shared_prefix(model, mb, **kw):
    args = (mb.prompt_ids, mb.prompt_mask, mb.response_ids, mb.response_mask)
    return policy_forward_shared_prefix(model, *args, mb.group_index, scored_mask=_policy_tokens(mb), **kw)


def _padded(model, mb, **kw):
    args = (mb.prompt_ids, mb.prompt_mask, mb.response_ids, mb.response_mask)
    return policy_forward(model, *args, scored_mask=_policy_tokens(mb), **kw)


FORWARD_LAYOUTS = {"packed": _packed, "shared_prefix": _shared_prefix, "padded": _padded}


def response_logprobs(model: nn.Module, batch: RolloutBatch, layout: str = "packed", **kwargs) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropies) of ``batch``'s responses with the ``train.forward`` layout ``layout``.

    ``packed`` encodes a group's prompt once when its rows really share it (``group_index`` +
    :func:`shares_prefixes`); when they share only a beginning it runs that beginning once as ``shared_prefix``
    does if that runs fewer positions, else gives each sample its own padding-free row. ``shared_prefix`` runs
    the common beginning of each group's prompts once (:func:`shared_prefixes`). Only the policy's own tokens are
    scored (an agent sample's environment tokens read as context and get 0). Keyword arguments go to the forward
    (``temperature``, ``with_entropy``, ``chunk_size``, ``cache_bytes``).

    ``model`` is a bare causal LM, or a :class:`grove.models.logprob_module.ResponseLogprobModule` (possibly
    inside DDP / FSDP2): then the call goes through the wrapper's ``forward`` so its hooks run, with the
    batch moved to the model's device.
    """
    from grove.models.logprob_module import logprob_module_of

    inner = logprob_module_of(model)
    if inner is not None:
        device = next(inner.parameters()).device
        out = model(batch.to(device) if batch.prompt_ids.device != device else batch, layout, **kwargs)
        if not torch.is_grad_enabled() and _is_fully_sharded(model):
            # FSDP2 leaves the root's parameters gathered after a forward, expecting a backward; after a no-grad
            # forward that state made the next backward skip the root's gradient reduce-scatter (embeddings and
            # final norm kept no gradient: tests/test_distributed_equivalence.py, two_epochs_recompute)
            model.reshard()
        return out
    return layout_logprobs(model, batch, layout, **kwargs)


def _is_fully_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def layout_logprobs(model: nn.Module, batch: RolloutBatch, layout: str = "packed", **kwargs) -> tuple[Tensor, Tensor | None]:
    """:func:`response_logprobs` on a bare causal LM (what :class:`ResponseLogprobModule` runs in its forward)."""
    if layout not in FORWARD_LAYOUTS:
        raise ValueError(f"unknown training-forward layout {layout!r}; choose one of {sorted(FORWARD_LAYOUTS)}")
    if layout == "packed" and not supports_packing(model):
        layout = "shared_prefix"  # sliding-window models: the KV fan-out keeps the model's own masking
    return FORWARD_LAYOUTS[layout](model, batch, **kwargs)
