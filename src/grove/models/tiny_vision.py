"""Tiny random vision-language model directories (LLaVA-style or Idefics3 / SmolVLM), with their processors, for
tests (offline, a few seconds).

The decoder and tokenizer are :mod:`grove.models.tiny`'s (a byte-level BPE with ChatML special tokens) plus the
family's image tokens; the vision tower is a one-layer SigLIP-style encoder over 32×32 images in 8×8 patches. The
chat template renders a message's content parts (``{"type": "image"}`` becomes the image token the processor
expands), so text prompts and image prompts share one template.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    GenerationConfig,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3Processor,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    SiglipVisionConfig,
)
from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig

from grove.models.composed_vision import parts_chat_template
from grove.models.tiny import CHATML_TEMPLATE, build_tiny_tokenizer

__all__ = ["PARTS_CHATML_TEMPLATE", "TINY_VISION_FAMILIES", "create_tiny_vision_model_dir"]

TINY_VISION_FAMILIES = ("llava", "idefics3")

#: ChatML over content that is a string or a list of text and image parts
PARTS_CHATML_TEMPLATE = parts_chat_template(CHATML_TEMPLATE)

_IDEFICS3_TOKENS = ("<fake_token_around_image>", "<global-img>", "<end_of_utterance>")


def _image_processor(family: str, image_size: int):
    if family == "llava":
        from transformers import SiglipImageProcessor

        return SiglipImageProcessor(size={"height": image_size, "width": image_size})
    from transformers import Idefics3ImageProcessor

    # images are resized to two crops' size at most and split into image_size crops, plus one global view
    return Idefics3ImageProcessor(size={"longest_edge": 2 * image_size}, max_image_size={"longest_edge": image_size})


def create_tiny_vision_model_dir(
    path: str | Path,
    *,
    family: str = "llava",
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    image_size: int = 32,
    patch_size: int = 8,
    context_length: int = 512,
) -> Path:
    """Write a randomly initialised vision-language model of ``family`` (:data:`TINY_VISION_FAMILIES`) and its
    processor to ``path`` and return it; loadable with :func:`grove.models.pretrained.load_policy`."""
    if family not in TINY_VISION_FAMILIES:
        raise ValueError(f"family must be one of {TINY_VISION_FAMILIES}, got {family!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer()
    extra = ("<image>",) + (_IDEFICS3_TOKENS if family == "idefics3" else ())
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *extra]})
    tokenizer.chat_template = PARTS_CHATML_TEMPLATE
    tokenizer.model_max_length = context_length
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    text = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4,
        max_position_embeddings=context_length, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, rms_norm_eps=1e-6,
    )
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  image_size=image_size, patch_size=patch_size)
    image_processor = _image_processor(family, image_size)
    if family == "llava":
        config = LlavaConfig(
            vision_config=SiglipVisionConfig(**vision), text_config=text, image_token_index=image_token,
            vision_feature_layer=-1, vision_feature_select_strategy="full", tie_word_embeddings=True,
        )
        model_class = LlavaForConditionalGeneration
        processor = LlavaProcessor(
            image_processor=image_processor, tokenizer=tokenizer, patch_size=patch_size,
            vision_feature_select_strategy="full", chat_template=PARTS_CHATML_TEMPLATE, image_token="<image>",
            num_additional_image_tokens=0,
        )
    else:
        config = Idefics3Config(
            vision_config=Idefics3VisionConfig(**vision).to_dict(), text_config=text.to_dict(),
            image_token_id=image_token, scale_factor=2, tie_word_embeddings=True,
        )
        model_class = Idefics3ForConditionalGeneration
        tokens_per_crop = (image_size // patch_size) ** 2 // 4  # the connector's pixel shuffle, scale factor 2
        processor = Idefics3Processor(
            image_processor=image_processor, tokenizer=tokenizer, image_seq_len=tokens_per_crop,
            chat_template=PARTS_CHATML_TEMPLATE,
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
