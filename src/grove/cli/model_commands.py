"""``grove compose-vlm``: a vision-language model composed offline from a text policy
(:func:`grove.models.composed_vision.compose_vision_language_model`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from grove.cli.terminal import console, fail

__all__ = ["compose_vlm"]


def compose_vlm(
    out_dir: Annotated[Path, typer.Argument(help="Where to write the model (must not exist, or be empty).")],
    text_model: Annotated[str, typer.Option("--text", help="The text policy: an embedded name or a model directory.")]
    = "smollm2-135m",
    image_size: Annotated[int, typer.Option(help="Side of the pictures the vision tower reads, in pixels.")] = 32,
    patch_size: Annotated[int, typer.Option(help="Side of a patch (one image token each), in pixels.")] = 8,
    vision_hidden: Annotated[int, typer.Option(help="Width of the vision tower.")] = 192,
    vision_layers: Annotated[int, typer.Option(help="Layers of the vision tower.")] = 2,
    vision_heads: Annotated[int, typer.Option(help="Attention heads of the vision tower.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the new weights.")] = 0,
) -> None:
    """Compose a vision-language model from a text policy: a new SigLIP-style vision tower and LLaVA projector in
    front of the text model's decoder (its weights unchanged). Train it with grove sft on captioned pictures
    (docs/vision-language.md)."""
    from grove.models.composed_vision import compose_vision_language_model
    from grove.models.pretrained import ModelLoadError

    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        fail(f"{out_dir} exists and is not an empty directory; choose another OUT_DIR")
    try:
        path = compose_vision_language_model(
            out_dir, text_model=text_model, image_size=image_size, patch_size=patch_size,
            vision_hidden=vision_hidden, vision_layers=vision_layers, vision_heads=vision_heads, seed=seed,
        )
    except (ModelLoadError, ValueError) as exc:
        fail(str(exc))
    console.print(str(path), markup=False, highlight=False, soft_wrap=True)
