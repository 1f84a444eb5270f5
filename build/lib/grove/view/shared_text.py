"""Text of a run made safe to show and to share: bidirectional controls made visible, absolute paths cut.

* Unicode's bidirectional embedding, override and isolate controls (U+202A–U+202E, U+2066–U+2069) reorder the text
  around them when shown: a sample, an observation or a reward name holding one could make the page show text in
  another order than the run wrote it (a "Trojan Source" text). Every one of them in the report's data and title
  is replaced by a visible ``[U+202E]``.
* A run's ``config.yaml`` holds the absolute paths of the machine it ran on (the model, ``output_dir``, data
  files, user code). ``grove view --hide-paths`` cuts each to its last part (``/home/ann/models/qwen`` →
  ``…/qwen``) in the config and in the runs' paths the report shows.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

__all__ = ["BIDI_CONTROLS", "absolute_paths", "cut_paths", "visible_controls"]

BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")

# a quoted string that starts with "/", or a bare word of two or more parts that starts with "/" (not inside a word,
# a relative path or a URL); a bare word ends at white space, a quote, a comma or a closing bracket (YAML's flow)
_ABSOLUTE_PATH = re.compile(
    r"""(?P<quote>['"])(?P<quoted>/[^'"\n]+)(?P=quote)"""
    r"""|(?<![\w.~/:\\-])(?P<bare>/[^\s'",\]}/]+(?:/[^\s'",\]}/]*)+)"""
)


def visible_controls(text: str) -> str:
    """``text`` with every bidirectional control shown as ``[U+XXXX]``."""
    return BIDI_CONTROLS.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def absolute_paths(text: str) -> int:
    """How many absolute paths ``text`` holds (what :func:`cut_paths` would cut)."""
    return sum(1 for _ in _ABSOLUTE_PATH.finditer(text))


def _last_part(path: str) -> str:
    return "…/" + PurePosixPath(path).name


def cut_paths(text: str) -> str:
    """``text`` with every absolute path cut to its last part, ``…/NAME`` (quotes kept)."""

    def cut(m: re.Match) -> str:
        if m.group("quote"):
            return f"{m.group('quote')}{_last_part(m.group('quoted'))}{m.group('quote')}"
        return _last_part(m.group("bare"))

    return _ABSOLUTE_PATH.sub(cut, text)
