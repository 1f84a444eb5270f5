"""The size rule of the report: which steps' samples it keeps and how it cuts them into pages.

At most ``max_steps`` steps of samples are kept, spread evenly over the run (the first and the last always
among them); each kept step's samples go, in order, into pages of at most ``page_samples`` samples and about
``page_bytes`` bytes of data, one ``.js`` file each, which the page loads only when its step is shown. A report
therefore holds at most ``max_steps`` steps of samples however long the run, and opening it reads the overview
data and one page."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ReportLimits:
    """The bounds on a report's size (the CLI's options)."""

    max_steps: int = 100  # steps of training samples kept, spread evenly; the same for held-out evaluations
    page_samples: int = 200  # samples per data page
    page_bytes: int = 2_000_000  # about this many bytes of data per page at most (a page holds one sample or more)
    max_text_chars: int = 20_000  # one prompt, completion or observation
    max_tokens: int = 8_192  # tokens of one sample's token details
    max_curve_points: int = 1_000  # points per training curve (every k-th step beyond that)
    max_compare_items: int = 1_000  # held-out items in the comparison

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")


def spread_evenly(items: list[Any], keep: int) -> list[Any]:
    """At most ``keep`` of ``items``, evenly spaced, the first and the last included."""
    if len(items) <= keep:
        return list(items)
    if keep == 1:
        return [items[-1]]
    picked = sorted({round(i * (len(items) - 1) / (keep - 1)) for i in range(keep)})
    return [items[i] for i in picked]


@dataclass
class Page:
    id: str
    items: list[dict[str, Any]]


@dataclass
class PagedSamples:
    """The pages of one sample collection and its index: per kept key (a step, or an evaluation's step and mode)
    its label, how many samples it has and which pages hold them."""

    name: str
    index: list[dict[str, Any]] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)
    keys_total: int = 0  # keys before the spread
    samples_total: int = 0  # samples of the kept keys

    def manifest(self) -> dict[str, Any]:
        return {
            "name": self.name, "keys": self.index, "keys_total": self.keys_total, "samples": self.samples_total,
            "pages": len(self.pages),
        }


def paginate(
    name: str,
    by_key: dict[Any, list[dict[str, Any]]],
    labels: dict[Any, tuple[str, str]],
    limits: ReportLimits,
    keys_total: int | None = None,
) -> PagedSamples:
    """Keep at most ``limits.max_steps`` keys of ``by_key`` (spread evenly, in key order) and cut their samples into
    pages; ``labels`` gives each key its id in the data and its title on the page. ``keys_total``: ``by_key`` is a
    selection already, kept whole, of that many keys. Page ids are ``<name>-0001`` and on."""
    keys = sorted(by_key)
    kept = keys if keys_total is not None else spread_evenly(keys, limits.max_steps)
    paged = PagedSamples(name=name, keys_total=len(keys) if keys_total is None else keys_total)
    current: list[dict[str, Any]] = []
    size = 0

    def close() -> None:
        nonlocal current, size
        if current:
            paged.pages.append(Page(f"{name}-{len(paged.pages) + 1:04d}", current))
            current, size = [], 0

    for key in kept:
        samples = by_key[key]
        pages: list[str] = []
        for position, sample in enumerate(samples):
            weight = len(json.dumps(sample, ensure_ascii=False))
            if current and (len(current) >= limits.page_samples or size + weight > limits.page_bytes):
                close()
            current.append({**sample, "_key": labels[key][0], "_position": position})
            size += weight
            page_id = f"{name}-{len(paged.pages) + 1:04d}"
            if not pages or pages[-1] != page_id:
                pages.append(page_id)
        paged.index.append({"key": labels[key][0], "title": labels[key][1], "count": len(samples), "pages": pages})
        paged.samples_total += len(samples)
    close()
    return paged
