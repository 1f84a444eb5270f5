"""A gold completion of a prompt with images as a ``messages`` row, its images saved as PNG files beside it.

Demonstration rows hold token ids, which cannot carry pixels, so a task whose prompts hold images (the ``shapes``
task, a ``jsonl`` task with an ``image_column``) writes rows ``grove sft`` reads as chat messages: the prompt's
messages with each image part naming a PNG file (relative to the demonstration file's folder), then the gold
completion as the assistant's message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grove.vision.image_prompts import load_image

__all__ = ["picture_row"]


def picture_row(
    prompt: Sequence[dict[str, Any]], completion: str, image_dir: Path, stem: str, **fields: Any
) -> dict[str, Any]:
    """The row of ``prompt`` (chat messages with image parts) answered by ``completion``; image ``k`` is saved as
    ``image_dir/<stem>-<k>.png`` and named ``<image_dir's name>/<stem>-<k>.png`` in the row. ``fields`` are
    added to the row (its source, task id, episode)."""
    image_dir.mkdir(parents=True, exist_ok=True)
    messages, saved = [], 0
    for message in prompt:
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image":
                    name = f"{stem}-{saved}.png"
                    load_image(part, f"example {stem}").save(image_dir / name)
                    parts.append({"type": "image", "image": f"{image_dir.name}/{name}"})
                    saved += 1
                else:
                    parts.append(dict(part))
            content = parts
        messages.append({"role": message["role"], "content": content})
    messages.append({"role": "assistant", "content": completion})
    return {"messages": messages, **fields}
