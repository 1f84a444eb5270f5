"""``model.init_from``: where a run's policy starts when it continues another run's weights.

The usual agent recipe is a supervised warm start (``grove sft``) and then RL (``grove train``) from its result. The
RL config names the warm-start run with ``model.init_from``, which may be:

* a run directory: its final ``model/`` (``grove sft`` writes one, merged when it trained LoRA adapters), else its
  newest intact checkpoint (:func:`grove.infra.checkpoint.find_loadable`);
* a checkpoint directory (``RUN/checkpoints/step-N``) or its ``model/``;
* any transformers model directory.

A LoRA adapter is merged into its base model once (:func:`grove.models.merged_export.export_merged`) and the merged model is
cached under the grove cache (``merged/<hash of the adapter>``), so the new run starts from full weights (and may
put new adapters on them). The run's reference policy, for the KL term, is this starting model: RL regularises
towards the warm start, as DeepSeek-R1's RL stages regularise towards their cold-start checkpoint.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from grove.infra import checkpoint as ckpt
from grove.models.pretrained import ModelLoadError, grove_cache_dir

__all__ = ["initial_model_dir", "newest_checkpoint_model", "policy_source"]

ADAPTER_CONFIG = "adapter_config.json"


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file() or (path / ADAPTER_CONFIG).is_file()


def initial_model_dir(init_from: str) -> Path:
    """The model (or adapter) directory ``init_from`` designates; :class:`ModelLoadError` naming it when there is
    none."""
    path = Path(init_from).expanduser()
    if not path.is_dir():
        raise ModelLoadError(
            f"model.init_from {init_from!r}: no such directory. It names the run to start from: make that warm start "
            "first (`grove demos` and `grove sft`, docs/warm-start.md), point it at another run, checkpoint or model "
            "directory, or start from model.name alone with --set model.init_from=null"
        )
    if _is_model_dir(path) and not ckpt.is_sharded(path.parent):
        return path
    if _is_model_dir(path / "model") and not ckpt.is_sharded(path):  # a run's final model, or a checkpoint directory
        return path / "model"
    return newest_checkpoint_model(path, f"model.init_from {init_from!r}", also_sharded=path.parent)


def newest_checkpoint_model(path: Path, label: str, also_sharded: Path | None = None) -> Path:
    """The ``model/`` of the newest intact checkpoint of the run directory ``path`` (a LoRA adapter there loads
    merged into its base model); :class:`ModelLoadError` naming ``label`` when the checkpoints are sharded (or
    ``also_sharded`` is), all damaged, or absent."""
    found = ckpt.find_loadable(path)
    for sharded in (also_sharded, path, found.path):
        if sharded is not None and ckpt.is_sharded(sharded):
            raise ModelLoadError(ckpt.sharded_model_refusal(sharded, label))
    if found.path is not None:
        return found.path / "model"
    if found.damaged:
        problems = "; ".join(f"{c.name}: {p}" for c, p in found.damaged)
        raise ModelLoadError(f"{label}: none of its checkpoints loads ({problems})")
    raise ModelLoadError(
        f"{label} holds no model: no config.json, no model/ and no checkpoints/ (did the run finish a step?); give a "
        "run directory whose run saved a checkpoint, a checkpoint directory or a model directory"
    )


def _merged_adapter(adapter_dir: Path) -> Path:
    """A full model merged from the LoRA adapter in ``adapter_dir`` (and its base), cached by the adapter's bytes."""
    from grove.models.merged_export import export_merged

    digest = hashlib.sha256()
    for name in sorted(p.name for p in adapter_dir.iterdir() if p.is_file()):
        if name.startswith("adapter_"):
            digest.update(name.encode())
            digest.update((adapter_dir / name).read_bytes())
    out = grove_cache_dir() / "merged" / digest.hexdigest()[:16]
    if not (out / "config.json").is_file():
        export_merged(adapter_dir, out)
    return out


def policy_source(name: str, init_from: str | None) -> str:
    """What to load the policy from: ``name`` (a model directory or an embedded name), or, with ``init_from``, the
    model directory it designates (a LoRA adapter merged into its base first)."""
    if init_from is None:
        return name
    directory = initial_model_dir(init_from)
    if (directory / ADAPTER_CONFIG).is_file():
        return str(_merged_adapter(directory))
    return str(directory)
