"""A vision-language model composed offline from a text policy: a small vision tower and a projector, new, in front
of a pretrained decoder (LLaVA-1.5's layout, ``LlavaForConditionalGeneration``).

No small pretrained vision-language model can be downloaded at run time, so :func:`compose_vision_language_model`
builds one from what ships offline: the decoder and tokenizer of ``text_model`` (by default the embedded
SmolLM2-135M-Instruct) with its weights as they are, one added image token (its embedding the mean of the others),
a SigLIP-style vision encoder of ``vision_layers`` layers over ``image_size`` pixel pictures cut into
``patch_size`` patches (one image token per patch), randomly initialised, and LLaVA's two-layer projector. The chat
template is the text model's, taught to render a message's content parts (an image part becomes the image token the
processor expands). The composed model reads text exactly as the text model did (tested: equal logits); it reads
pictures only after training: ``grove sft`` on captioned pictures trains the tower and projector (and the decoder)
together (docs/vision-language.md has the recipe and its measured result).

Limits: the tower sees ``image_size``-pixel pictures only (the processor resizes), starts from nothing, and has no
pretraining on natural images: it suits generated pictures (shapes, digits, charts), not photographs.
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["compose_vision_language_model", "parts_chat_template"]

IMAGE_TOKEN = "<image>"

_CONTENT_MACRO = (
    "{% macro grove_content(content) %}{% if content is string %}{{ content }}{% else %}"
    "{% for part in content %}{% if part['type'] == 'image' %}" + IMAGE_TOKEN + "{% elif part['type'] == 'text' %}"
    "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{% endmacro %}"
)


def parts_chat_template(template: str) -> str:
    """``template`` (a text model's chat template) rendering a message's content parts: every
    ``message['content']`` becomes the text of its parts, an image part the image token."""
    if "message['content']" not in template:
        raise ValueError("the text model's chat template does not read message['content']; write the template by hand")
    return _CONTENT_MACRO + template.replace("message['content']", "grove_content(message['content'])")


def compose_vision_language_model(
    out_dir: str | Path,
    *,
    text_model: str = "smollm2-135m",
    image_size: int = 32,
    patch_size: int = 8,
    vision_hidden: int = 192,
    vision_layers: int = 2,
    vision_heads: int = 3,
    seed: int = 0,
) -> Path:
    """Write the composed model (module docstring) and its processor to ``out_dir``; loadable with
    :func:`grove.models.pretrained.load_policy` like any vision-language model directory."""
    from transformers import (
        GenerationConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        SiglipImageProcessor,
        SiglipVisionConfig,
    )

    from grove.models.pretrained import load_policy

    if image_size % patch_size:
        raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
    if vision_hidden % vision_heads:
        raise ValueError(f"vision_hidden {vision_hidden} is not a multiple of vision_heads {vision_heads}")
    out = Path(out_dir)
    text, tokenizer = load_policy(text_model)
    tokenizer.add_tokens([IMAGE_TOKEN], special_tokens=True)
    template = parts_chat_template(tokenizer.chat_template)
    tokenizer.chat_template = template
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        text.resize_token_embeddings(len(tokenizer), mean_resizing=True)
        vision = SiglipVisionConfig(
            hidden_size=vision_hidden, intermediate_size=4 * vision_hidden, num_hidden_layers=vision_layers,
            num_attention_heads=vision_heads, image_size=image_size, patch_size=patch_size,
        )
        config = LlavaConfig(
            vision_config=vision, text_config=text.config, image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
            vision_feature_layer=-1, vision_feature_select_strategy="full", projector_hidden_act="gelu",
            tie_word_embeddings=text.config.tie_word_embeddings,
        )
        model = LlavaForConditionalGeneration(config).to(torch.float32)
    model.model.language_model.load_state_dict(text.model.state_dict())
    if not text.config.tie_word_embeddings:
        model.lm_head.load_state_dict(text.lm_head.state_dict())
    model.tie_weights()
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    processor = LlavaProcessor(
        image_processor=SiglipImageProcessor(size={"height": image_size, "width": image_size}), tokenizer=tokenizer,
        patch_size=patch_size, vision_feature_select_strategy="full", chat_template=template,
        image_token=IMAGE_TOKEN, num_additional_image_tokens=0,
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out
