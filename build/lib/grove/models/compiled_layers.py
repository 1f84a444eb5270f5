"""``train.compile``: each decoder layer of the training model compiled with ``torch.compile``.

Eager PyTorch runs a decoder layer as ~50 separate operators per micro-batch (norms, rotary, casts under
autocast, residual adds, SiLU, and their backward), each a Python dispatch and a pass over memory. Inductor
fuses the elementwise ones into generated kernels around the matrix products and the attention. Compiling
the *layer*, not the whole model, keeps the graph small: the layers are instances of one class, so one
compilation serves all of them (``nn.Module.compile`` with the module's parameters as graph inputs), and
``dynamic=True`` lets one graph take every micro-batch length. The output projection and the loss stay eager
(:mod:`grove.kernels.output_projection` already avoids the ``[tokens, vocab]`` logits tensor).

The compilation is paid once, in the first update (less when inductor's on-disk cache already holds it); each
later update is shorter, most in bf16 (measured by ``benchmarks/vs_trl.py``'s ``…-compiled`` workers and
``benchmarks/micro_batch_size.py --set train.compile=true``; results in docs/benchmarks.md). Inductor reorders and
fuses float arithmetic, so the numbers equal eager's up to float rounding (tested to 1e-5 relative in float32), not
bit for bit. Generation runs on its own copy of the weights and is not compiled; the no-grad entropy pass of
``logging.token_details`` runs the compiled layers eagerly (:func:`grove.pipeline.token_details.token_entropy`).

On a CPU inductor writes and builds C++: it needs a C++ compiler on ``PATH``. Launches with several ranks
(DDP / FSDP2) are not supported yet (not measured); :func:`compile_decoder_layers` is applied before any
wrapping.
"""

from __future__ import annotations

import shutil
import warnings

import torch
from torch import nn

from grove.models.padded_forward import decoder_backbone

__all__ = ["CompileUnavailable", "compile_decoder_layers", "decoder_layers"]

# torch's own inductor imports torch.utils.mkldnn, whose ScriptModule uses torch's deprecated torch.jit.script_method:
# a notice about torch's internals, not about anything a user or grove calls
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script_method` is deprecated", category=DeprecationWarning)


class CompileUnavailable(RuntimeError):
    """``train.compile`` cannot run here (no C++ compiler for inductor's CPU backend, or no layer list)."""


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder's list of layers of a transformers causal LM (or a peft model around one): the ``layers`` of
    the backbone the training forward runs (:func:`grove.models.padded_forward.decoder_backbone`)."""
    try:
        layers = getattr(decoder_backbone(model), "layers", None)
    except TypeError:
        layers = None
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise CompileUnavailable(
            f"train.compile: cannot find the decoder layers of {type(model).__name__} (expected a `layers` "
            "ModuleList on its decoder); set train.compile: false for this model"
        )
    return layers


def _has_cpp_compiler() -> bool:
    return any(shutil.which(name) for name in ("g++", "c++", "clang++"))


def compile_decoder_layers(model: nn.Module, device: torch.device | str = "cpu") -> int:
    """Compile every decoder layer of ``model`` in place (``nn.Module.compile``, inductor, dynamic shapes);
    returns the number of layers. The modules, parameters and state-dict keys are unchanged; compilation
    happens at the first forward."""
    if torch.device(device).type == "cpu" and not _has_cpp_compiler():
        raise CompileUnavailable(
            "train.compile: torch.compile's CPU backend builds C++ and no C++ compiler (g++, c++ or clang++) is "
            "on PATH; install one (e.g. `apt install g++`) or set train.compile: false"
        )
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)
