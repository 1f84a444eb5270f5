"""The project's text describes the library, not how it was built: no numbered work items, no sessions, no
ordinal runs or measurements of its development.

A pure text scan (grove is not imported) of the README, docs/**/*.md, the Python sources of src, benchmarks,
scripts and tests, every text file under examples, the Makefile and pyproject.toml. Matches inside URLs (a citation
such as another project's issue page) are allowed. This file is not scanned: its patterns and examples would match.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SELF = Path(__file__).resolve()

# (root-relative folder or file, glob inside a folder; None for a single file)
SCANNED = (
    ("README.md", None),
    ("Makefile", None),
    ("pyproject.toml", None),
    ("docs", "**/*.md"),
    ("src", "**/*.py"),
    ("benchmarks", "**/*.py"),
    ("scripts", "**/*.py"),
    ("tests", "**/*.py"),
    ("examples", "**/*"),
)
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".venv", "node_modules"}

_ORDINALS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
)
_SPACE = r"\s+"  # phrases may wrap onto the next line
HISTORY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("numbered work item", r"\bissues?\s*#?\d+\b"),
        (
            "session",
            r"\b(?:this|that|a\s+later|later|next|previous|earlier)" + _SPACE + r"session\b",
        ),
        ("ordinal session, run or measurement", rf"\b(?:{_ORDINALS}){_SPACE}(?:session|run|measurement)s?\b"),
        ("earlier run", r"\bearlier" + _SPACE + r"runs?\b"),
        ("previous run", r"\bprevious" + _SPACE + r"runs?\b"),
        ("work item", r"\bwork" + _SPACE + r"items?\b"),
    )
)
# a citation: the match lies inside a URL (e.g. another project's issue page)
URL = re.compile(r"(?:https?://|www\.|github\.com/)[^\s)>\]\"'`]+", re.IGNORECASE)


def scanned_files() -> Iterator[Path]:
    for name, glob in SCANNED:
        base = ROOT / name
        if glob is None:
            if base.is_file():
                yield base
            continue
        if not base.is_dir():
            continue
        for path in sorted(base.glob(glob)):
            if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
                if path.resolve() != SELF:
                    yield path


def read_text(path: Path) -> str | None:
    """The file's text, or None for a binary file (an image under examples or docs)."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def history_hits(text: str) -> list[tuple[int, str, str]]:
    """``(line number, pattern name, line)`` for each match outside a URL, in file order."""
    urls = [m.span() for m in URL.finditer(text)]
    lines = text.splitlines()
    hits = []
    for name, pattern in HISTORY_PATTERNS:
        for match in pattern.finditer(text):
            if any(start <= match.start() < end for start, end in urls):
                continue
            line_no = text.count("\n", 0, match.start()) + 1
            hits.append((line_no, name, lines[line_no - 1].strip() if line_no <= len(lines) else ""))
    return sorted(set(hits))


def test_patterns_match_history_and_spare_other_senses() -> None:
    ticket = "iss" + "ue"
    assert history_hits(f"(docs/benchmarks.md, {ticket} 16)")
    assert history_hits(f"the work ({ticket}s 4 and 16)")
    assert history_hits(f"{ticket} #4")
    assert history_hits("in the tenth " + "session")
    assert history_hits("the ninth\n" + "run")
    assert history_hits("first " + "measurement")
    assert history_hits("as in earlier " + "runs")
    assert history_hits("work " + "items")
    # other senses and citations are not history
    assert not history_hits(f"see https://github.com/huggingface/trl/{ticket}s/1234 for the bug")
    assert not history_hits("the first pass of the loop; a pytest session fixture; the session's cache dir")
    assert not history_hits("an HTTP server with one session per process; each session its own state")
    assert not history_hits(f"an {ticket} with the tokenizer; the first step of a run")


def test_no_development_history_in_project_text() -> None:
    found = []
    for path in scanned_files():
        text = read_text(path)
        if text is None:
            continue
        rel = path.relative_to(ROOT).as_posix()
        for line_no, name, line in history_hits(text):
            shown = line if len(line) <= 160 else line[:157] + "..."
            found.append(f"{rel}:{line_no}: [{name}] {shown}")
    assert not found, (
        f"{len(found)} mention(s) of development history (describe the library, not how it was built):\n"
        + "\n".join(found)
    )
