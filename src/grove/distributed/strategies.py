"""Data-parallel strategies (``distributed.strategy``) around the training-forward module, and what the update
needs from them.

* ``none``: one process; the module is used as it is.
* ``ddp``: ``torch.nn.parallel.DistributedDataParallel``. Every rank holds the full model and optimizer
  state; gradients are all-reduced once per optimizer step (micro-batches before the last run under
  ``no_sync``, so accumulation adds no communication).
* ``fsdp2``: ``torch.distributed.fsdp.fully_shard`` on each decoder layer and on the root. Parameters,
  gradients and AdamW state are sharded over the ranks (each holds ``1/N``); a layer's parameters are
  all-gathered just before it runs and freed after; gradients are reduce-scattered once per optimizer step
  (``set_requires_gradient_sync(False)`` on the micro-batches before the last).

Both wrappers average gradients over ranks. grove's losses are already divided by the *global* token or
sequence count (all-reduced before the micro-batch loop), so each rank's loss is multiplied by
:attr:`Strategy.gradient_scale` ``= N`` before backward: the averaged gradient is then exactly the gradient
of the single-process loss on the union of the ranks' samples.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from grove.distributed.world import World

__all__ = ["STRATEGIES", "Strategy", "StrategyName", "decoder_layers", "wrap_for_training"]

StrategyName = Literal["none", "ddp", "fsdp2"]
STRATEGIES: tuple[str, ...] = ("none", "ddp", "fsdp2")


@dataclass(frozen=True)
class Strategy:
    """How the wrapped training module accumulates, reduces and clips gradients."""

    name: str
    world: World

    @property
    def gradient_scale(self) -> float:
        """Factor on each rank's loss that turns the wrappers' gradient average into the global sum."""
        return float(self.world.size) if self.name in ("ddp", "fsdp2") else 1.0

    @property
    def gradients_written_in_place(self) -> bool:
        """Whether a backward may add a gradient straight into a parameter's ``.grad``, bypassing autograd's
        accumulation (``grove.kernels.output_projection.accumulating_weight_gradient_in_place``). Only with one
        process: DDP's reducer learns of a gradient from autograd's accumulation hooks, and FSDP2's parameters
        are sharded."""
        return self.name == "none"

    @contextlib.contextmanager
    def accumulating(self, model: nn.Module, sync: bool) -> Iterator[None]:
        """Backward passes in this block reduce gradients across ranks only when ``sync`` (the last micro-batch)."""
        if self.name == "ddp" and not sync:
            with model.no_sync():
                yield
        elif self.name == "fsdp2":
            model.set_requires_gradient_sync(sync)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)
        else:
            yield

    def clip_grad_norm(self, params: Iterable[nn.Parameter], max_norm: float) -> float:
        """Clip to the global gradient norm (sharded gradients: their norm is reduced over ranks) and return it."""
        params = [p for p in params if p.grad is not None]
        if not params:
            return 0.0
        total = torch.nn.utils.get_total_norm([p.grad for p in params])
        if hasattr(total, "full_tensor"):  # FSDP2: a DTensor partial norm, reduced over the shards here
            total = total.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return float(total)


def decoder_layers(causal_lm: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a (possibly peft-wrapped) causal LM: the units FSDP2 shards one by one (a
    vision-language model's are its text decoder's, ``get_decoder()``, not its vision tower's)."""
    base = causal_lm.get_base_model() if hasattr(causal_lm, "get_base_model") else causal_lm
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers):
        return list(layers)
    for module in causal_lm.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, nn.ModuleList) and len(layers) and module is not causal_lm:
            return list(layers)
    raise TypeError(f"cannot find the decoder layers of {type(causal_lm).__name__} to shard with FSDP2")


def wrap_for_training(module: nn.Module, name: str, world: World) -> tuple[nn.Module, Strategy]:
    """Move ``module`` to the world's device and wrap it for ``name`` (``none`` | ``ddp`` | ``fsdp2``)."""
    if name not in STRATEGIES:
        raise ValueError(f"distributed.strategy must be one of {STRATEGIES}, got {name!r}")
    module = module.to(world.device)
    if not world.distributed or name == "none":
        return module, Strategy("none", world)
    if name == "ddp":
        import inspect

        from torch.nn.parallel import DistributedDataParallel

        device_ids = [world.device.index] if world.device.type == "cuda" else None
        # no buffers to keep in sync (rotary tables are recomputed); syncing them each forward is a collective the
        # reference and recompute passes must not depend on (the option was renamed in torch 2.13)
        renamed = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
        no_buffer_sync = {"forward_sync_buffers": False} if renamed else {"broadcast_buffers": False}
        # a vision-language model's tower holds layers its forward never reads (LLaVA takes an inner layer's features,
        # so the tower's last norm and pooling head get no gradient): DDP must then find them after each backward
        unused = _has_unused_vision_layers(module)
        wrapped = DistributedDataParallel(module, device_ids=device_ids, find_unused_parameters=unused, **no_buffer_sync)
        return wrapped, Strategy("ddp", world)
    return shard_fully(module, world), Strategy("fsdp2", world)


def _has_unused_vision_layers(module: nn.Module) -> bool:
    """Whether ``module`` (the training-forward module, or the causal LM itself) is a vision-language model (its
    config has a ``vision_config``)."""
    config = getattr(getattr(module, "causal_lm", module), "config", None)
    return getattr(config, "vision_config", None) is not None


def shard_fully(module: nn.Module, world: World) -> nn.Module:
    """FSDP2: each decoder layer its own unit, the rest (embeddings, final norm, head) in the root unit."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(world.device.type, (world.size,))
    for layer in decoder_layers(module):
        fully_shard(layer, mesh=mesh)
    fully_shard(module, mesh=mesh)
    return module
