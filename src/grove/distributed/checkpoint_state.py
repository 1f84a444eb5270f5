"""Full (unsharded) state dicts of the training module and its optimizer, gathered on rank 0 for a checkpoint
and scattered back on resume, through ``torch.distributed.checkpoint.state_dict``.

Why full state dicts on rank 0 rather than ``torch.distributed.checkpoint``'s sharded files: a checkpoint is
then the same thing whatever wrote it (one process, DDP or FSDP2, any number of ranks): a ``save_pretrained``
model directory plus ``trainer_state.pt`` with the optimizer state keyed by parameter name. It resumes under
any strategy and world size (each rank keeps its shard of the full tensors on load), and its ``model/`` is
loadable by transformers as it is. The cost is that rank 0 holds one full copy of the weights and the AdamW
moments in CPU memory while it writes (3× the fp32 weights: 1.6 GB for a 135M model, 24 GB for 2B), which is
fine for the model sizes a CPU-or-few-GPU run trains. Beyond that, ``checkpoint.format: sharded`` writes
``torch.distributed.checkpoint`` (DCP) files instead (:func:`save_sharded_state`): each rank its own shard, and
:func:`load_sharded_state` reads them into the current world's layout (DCP reshards on load), so those too
resume under any strategy and world size.

Keys are the training module's parameter names (``causal_lm.model.layers.0...``; DDP's ``module.`` prefix is
removed by the state-dict API), the same under every strategy.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from torch import Tensor, nn

__all__ = [
    "CAUSAL_LM_PREFIX",
    "gather_full_model_state",
    "gather_full_optimizer_state",
    "load_full_optimizer_state",
    "load_sharded_state",
    "save_sharded_state",
]

CAUSAL_LM_PREFIX = "causal_lm."
_ONE_PROCESS = "torch.distributed is disabled"  # DCP's note that one process saves or loads alone: that is intended


def _options(gather: bool):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # gathering: full tensors, copied to CPU on rank 0 only (other ranks get {}); loading: full tensors on
    # every rank, each keeping its own shard
    return StateDictOptions(full_state_dict=True, cpu_offload=gather)


def gather_full_model_state(model: nn.Module) -> dict[str, Tensor]:
    """The causal LM's full state dict (transformers / peft key names) on rank 0, ``{}`` on the others.

    Every rank must call it (it all-gathers sharded parameters)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = get_model_state_dict(model, options=_options(True))
    return {k[len(CAUSAL_LM_PREFIX):]: v for k, v in state.items() if k.startswith(CAUSAL_LM_PREFIX)}


def gather_full_optimizer_state(model: nn.Module, optimizer) -> dict[str, Any]:
    """The optimizer's full state keyed by parameter name on rank 0 (``{}`` elsewhere); every rank calls it."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_options(True))


def load_full_optimizer_state(model: nn.Module, optimizer, state: dict[str, Any]) -> None:
    """Load a state written by :func:`gather_full_optimizer_state` (any strategy or world size); checkpoints
    from before name-keyed states (integer parameter ids) load directly into an unsharded optimizer."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    if state.get("state") and all(isinstance(k, int) for k in state["state"]):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # not strict: a parameter that never received a gradient has no optimizer state to save (a vision tower's
    # layers past the one the projector reads), and has none in the uninterrupted run either
    options = StateDictOptions(full_state_dict=True, cpu_offload=False, strict=False)
    set_optimizer_state_dict(model, optimizer, state, options=options)


def save_sharded_state(model: nn.Module, optimizer, directory: Path) -> None:
    """Write the model's and optimizer's states as DCP files in ``directory``: each rank writes its own shard
    (``__RANK_0.distcp``; a tensor every rank holds whole is written once), the coordinator (rank 0) the
    ``.metadata`` that indexes them, last. Every rank calls it with the same ``directory`` (a file system all
    ranks share); a failure on any rank raises on every rank."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _ONE_PROCESS, UserWarning)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=directory)


def load_sharded_state(model: nn.Module, optimizer, directory: Path) -> None:
    """Read DCP files written by :func:`save_sharded_state` (any strategy or world size) into ``model`` and
    ``optimizer`` in their current layout: each FSDP2 rank reads its shard of every tensor, a DDP rank or a single
    process the full tensors. Every rank calls it; one process needs no process group."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _ONE_PROCESS, UserWarning)
        dcp.load(state, checkpoint_id=directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
