"""The processor of a vision-language policy, reachable from its tokenizer.

grove passes the policy's tokenizer around; a vision-language policy's tokenizer is its processor's, and
:func:`attach_processor` (called where the policy is loaded) keeps the processor and the model's family beside it, so
every place that encodes prompts finds it with :func:`processor_of`, and a checkpoint saves the processor's files
(:func:`tokenizer_files`).
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from grove.vision.families import VisionFamily

__all__ = ["attach_processor", "processor_of", "save_tokenizer_files", "tokenizer_files"]


# the processor of each vision-language tokenizer (the tokenizer is what grove passes around; it does not own the
# processor, and a processor must not outlive its model's run)
_PROCESSORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def attach_processor(tokenizer: Any, processor: Any, family: VisionFamily) -> None:
    """Make ``processor`` (and the model's family) reachable from its ``tokenizer`` (:func:`processor_of`)."""
    _PROCESSORS[tokenizer] = (processor, family)


def processor_of(tokenizer: Any) -> tuple[Any, VisionFamily] | None:
    """``(processor, family)`` of a vision-language policy's tokenizer; ``None`` for a text-only one."""
    return _PROCESSORS.get(tokenizer)


def tokenizer_files(tokenizer: Any) -> Any:
    """What saves the files that load the policy's tokenizer again (``save_pretrained``): the processor of a
    vision-language policy (its tokenizer, image processor and chat template), else the tokenizer itself."""
    found = processor_of(tokenizer)
    return found[0] if found is not None else tokenizer


def save_tokenizer_files(tokenizer: Any, directory: str | Path) -> None:
    """Save :func:`tokenizer_files` of ``tokenizer`` into ``directory``."""
    tokenizer_files(tokenizer).save_pretrained(directory)
