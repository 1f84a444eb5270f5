"""Generated pictures of coloured shapes: each a seeded draw of one to three shapes on a noisy background.

A picture is an ``[S, S, 3]`` uint8 array. Its shapes (:data:`SHAPES`: circle, square, triangle) are drawn with
Pillow in one of :data:`COLOURS`, at least ``S / 4`` pixels across, placed so they do not overlap. What a question
asks (the colour or the kind of the first shape, both, or how many there are) is read off the
:class:`Picture`'s ``shapes``, so answers are exact by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["COLOURS", "SHAPES", "Picture", "ShapeSpec", "draw_picture"]

SHAPES = ("circle", "square", "triangle")
COLOURS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 30)}


@dataclass(frozen=True)
class ShapeSpec:
    kind: str
    colour: str
    box: tuple[int, int, int, int]  # left, top, right, bottom (inclusive)


@dataclass(frozen=True)
class Picture:
    pixels: np.ndarray  # [S, S, 3] uint8
    shapes: tuple[ShapeSpec, ...]


def _overlaps(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return not (a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1])


def draw_picture(rng: np.random.Generator, size: int = 32, count: int = 1) -> Picture:
    """One picture of ``count`` shapes (``size`` pixels square), drawn from ``rng``."""
    from PIL import Image, ImageDraw

    background = rng.integers(200, 246, size=(size, size, 3), dtype=np.uint8)
    image = Image.fromarray(background)
    draw = ImageDraw.Draw(image)
    shapes: list[ShapeSpec] = []
    smallest = max(4, size // 4)
    largest = max(smallest + 1, size // 2 if count > 1 else (size * 3) // 4)
    while len(shapes) < count:
        side = int(rng.integers(smallest, largest + 1))
        left, top = (int(v) for v in rng.integers(0, size - side + 1, size=2))
        box = (left, top, left + side - 1, top + side - 1)
        if any(_overlaps(box, s.box) for s in shapes):
            continue
        kind = SHAPES[int(rng.integers(len(SHAPES)))]
        colour = list(COLOURS)[int(rng.integers(len(COLOURS)))]
        fill = COLOURS[colour]
        if kind == "circle":
            draw.ellipse(box, fill=fill)
        elif kind == "square":
            draw.rectangle(box, fill=fill)
        else:
            draw.polygon([(left + side / 2, top), (box[2], box[3]), (left, box[3])], fill=fill)
        shapes.append(ShapeSpec(kind, colour, box))
    return Picture(np.asarray(image, dtype=np.uint8).copy(), tuple(shapes))
