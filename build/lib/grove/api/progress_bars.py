"""The console of a run started from Python shows grove's progress, not the libraries' own bars.

``grove`` on the command line turns the Hugging Face progress bars off before transformers is imported; a notebook
has usually imported it already, so here they are turned off for the duration of a call and turned back on after
it, leaving the notebook's own settings as they were.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["library_progress_bars_off"]


@contextmanager
def library_progress_bars_off() -> Iterator[None]:
    """transformers' and huggingface_hub's progress bars ("Loading weights", ...) off inside the block."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is first imported
    from transformers.utils import logging as transformers_logging

    was_enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            transformers_logging.enable_progress_bar()
