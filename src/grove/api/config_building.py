"""A run's config built in Python: from a YAML file, a dict or a config, with keyword sections, ``--set``-style
overrides, and the Python objects a notebook holds (reward functions, an environment factory, in-memory data).

Everything ends in the same validation as ``grove train CONFIG --set ...`` (the schema, the preset, then the front
door, :func:`grove.resolve.resolve`: every component, what it requires, the user's code and the model's files), so a
mistake is the same :class:`grove.config.ConfigError` naming the key. Python objects become references a config can hold
(:mod:`grove.python_objects`): an import path where the object has one, else ``python:<name>``; in-memory rows
become the run directory's own data files (:mod:`grove.api.in_memory_data`), written once the config has passed
every check, so that a refused call writes nothing.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grove.api.in_memory_data import RowsFile, rows_file
from grove.config import ConfigError, GroveConfig, apply_overrides, config_from_data, read_config_data
from grove.python_objects import reference_for

if TYPE_CHECKING:
    from grove.resolve import RunKind, RunPlan

__all__ = ["ConfigSource", "checked_config", "config_data", "make_config"]

#: what a config may be built from: a YAML file, the mapping such a file holds, or a config
ConfigSource = str | Path | Mapping[str, Any] | GroveConfig | None

#: the default run directory of a config built in Python
DEFAULT_OUTPUT_DIR = "runs/run"


def _plain_paths(value: Any) -> Any:
    """``value`` with every ``pathlib.Path`` (any path-like object) in it as the string a config holds."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {key: _plain_paths(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_paths(item) for item in value]
    return value


def _source_data(source: ConfigSource) -> dict[str, Any]:
    if source is None:
        return {}
    if isinstance(source, GroveConfig):
        return source.model_dump(mode="json")
    if isinstance(source, str | Path):
        return read_config_data(Path(source))
    if isinstance(source, Mapping):
        return _plain_paths(copy.deepcopy(dict(source)))
    raise ConfigError(
        f"config: expected a YAML file path, a dict or a GroveConfig, got {type(source).__name__}"
    )


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` merged into ``base``: mappings key by key (``train={"steps": 5}`` keeps the other train keys),
    anything else replaced."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value) if isinstance(value, Mapping | list) else value
    return base


def _reward_block(item: Any, index: int, taken: set[str]) -> dict[str, Any]:
    """One ``rewards:`` block from a callable, an id or import path, or a block whose ``id`` may be a callable."""
    if callable(item) and not isinstance(item, type | str):
        return {"id": reference_for(item, taken=taken)}
    if isinstance(item, str):
        return {"id": item}
    if isinstance(item, Mapping):
        block = dict(item)
        fn = block.get("id")
        if callable(fn) and not isinstance(fn, str):
            block["id"] = reference_for(fn, taken=taken)
        return block
    raise ConfigError(
        f"rewards.{index}: expected a function, a registered reward id, an import path or a dict "
        f"{{id: ..., weight: ...}}, got {type(item).__name__}"
    )


def _env_block(env: Any, current: Any) -> dict[str, Any]:
    """The ``env`` section with a factory handed over: its ``id`` replaced, the section's other keys kept."""
    block = dict(current) if isinstance(current, Mapping) else {}
    if isinstance(env, Mapping):
        block.update(env)
    else:
        block["id"] = env
    factory = block.get("id")
    if callable(factory) and not isinstance(factory, str):
        block["id"] = reference_for(factory)
    elif not isinstance(factory, str):
        raise ConfigError(
            f"env: expected an environment factory (a callable returning an EnvironmentSuite), a registered id, an "
            f"import path or a dict {{id: ..., params: ..., max_turns: ...}}, got {type(factory).__name__}"
        )
    return block


def _override_list(overrides: Any) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    if not isinstance(overrides, Iterable):
        raise ConfigError(
            f"overrides: expected a list of 'key.path=value' strings, got {type(overrides).__name__}; for example "
            "overrides=['train.steps=5']"
        )
    overrides = list(overrides)
    for i, item in enumerate(overrides):
        if not isinstance(item, str):
            raise ConfigError(
                f"overrides.{i}: expected a 'key.path=value' string, got {type(item).__name__}; for example "
                "overrides=['train.steps=5']"
            )
    return overrides


def _reward_list(rewards: Any) -> list[Any]:
    if isinstance(rewards, str | Mapping) or callable(rewards):
        return [rewards]
    if not isinstance(rewards, Iterable):
        raise ConfigError(
            f"rewards: expected a list of reward functions, registered ids, import paths or dicts {{id: ..., "
            f"weight: ...}}, got {type(rewards).__name__}"
        )
    return list(rewards)


def _task_block(
    data: dict[str, Any], train_dataset: Any, eval_dataset: Any, files: list[RowsFile]
) -> dict[str, Any]:
    """The ``jsonl`` task reading the rows' files in the run directory (added to ``files``, not yet written); the
    config's own ``jsonl`` task keeps its column settings, any other task is refused (the data would replace
    it)."""
    task = data.get("task")
    if task is not None and not (isinstance(task, Mapping) and task.get("id") in (None, "jsonl")):
        task_id = task.get("id") if isinstance(task, Mapping) else task
        raise ConfigError(
            f"train_dataset replaces the config's task ({task_id!r}): remove `task` from the config, or set "
            "task: {id: jsonl, prompt_column: ..., answer_column: ...} to say which columns hold the prompt and the "
            "answer"
        )
    output_dir = str(data.get("output_dir") or DEFAULT_OUTPUT_DIR)
    block = {**(task or {}), "id": "jsonl"}
    splits = [("train", train_dataset)] + ([("eval", eval_dataset)] if eval_dataset is not None else [])
    for split, dataset in splits:
        rows = rows_file(dataset, output_dir, split, f"{split}_dataset")
        block[f"{split}_path"] = str(rows.path)
        files.append(rows)
    return block


def config_data(
    source: ConfigSource = None,
    *,
    overrides: Sequence[str] | None = None,
    rewards: Sequence[Callable[..., Any] | str | Mapping[str, Any]] | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    env: Callable[..., Any] | str | Mapping[str, Any] | None = None,
    **sections: Any,
) -> tuple[dict[str, Any], list[RowsFile]]:
    """The config's data before validation (see :func:`make_config`), and the files of its in-memory rows in the
    run directory, checked and not yet written."""
    data = _merge(_source_data(source), _plain_paths(sections))
    data = apply_overrides(data, _override_list(overrides))
    taken: set[str] = set()
    if rewards is not None:
        data["rewards"] = _reward_list(rewards)
    if isinstance(data.get("rewards"), list):
        data["rewards"] = [_reward_block(item, i, taken) for i, item in enumerate(data["rewards"])]
    if env is not None or (isinstance(data.get("env"), Mapping) and callable(data["env"].get("id"))):
        data["env"] = _env_block(env if env is not None else data["env"], data.get("env"))
    if eval_dataset is not None and train_dataset is None:
        raise ConfigError("eval_dataset needs a train_dataset (the task's training rows) beside it")
    files: list[RowsFile] = []
    if train_dataset is not None:
        data["task"] = _task_block(data, train_dataset, eval_dataset, files)
    return data, files


def checked_config(
    source: ConfigSource = None,
    *,
    kind: RunKind = "train",
    overrides: Sequence[str] | None = None,
    rewards: Sequence[Callable[..., Any] | str | Mapping[str, Any]] | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    env: Callable[..., Any] | str | Mapping[str, Any] | None = None,
    **sections: Any,
) -> tuple[RunPlan, list[RowsFile]]:
    """The config :func:`make_config` builds, resolved for a run of ``kind`` by the front door
    (:func:`grove.resolve.resolve`), with the files of its in-memory rows still to write (a caller with checks of its
    own writes them after those)."""
    from grove.resolve import resolve  # registers every component (imports torch)

    data, files = config_data(
        source, overrides=overrides, rewards=rewards, train_dataset=train_dataset, eval_dataset=eval_dataset,
        env=env, **sections,
    )
    cfg = config_from_data(data)
    _check_kind_section(cfg, kind)
    # the schema, every component, the rewards and environment factory, the model and its LoRA targets
    return resolve(cfg, kind), files


#: the section ``kind="sft"`` and ``kind="rm"`` train on, with an example and the page that describes it
_SECTIONS = {
    "sft": ("{'data': ['demos.jsonl']}", "docs/warm-start.md"),
    "rm": ("{'data': ['pairs.jsonl'], 'objective': 'bradley_terry'}", "docs/reward-model-training.md"),
}


def _check_kind_section(cfg: GroveConfig, kind: str) -> None:
    """``kind="sft"`` and ``kind="rm"`` train on the data of the config's section of that name."""
    if kind in _SECTIONS and getattr(cfg, kind) is None:
        example, page = _SECTIONS[kind]
        raise ConfigError(
            f"kind={kind!r} needs the config's `{kind}` section naming its data, e.g. {kind}={example} ({page})"
        )


def make_config(
    source: ConfigSource = None,
    *,
    overrides: Sequence[str] | None = None,
    rewards: Sequence[Callable[..., Any] | str | Mapping[str, Any]] | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    env: Callable[..., Any] | str | Mapping[str, Any] | None = None,
    **sections: Any,
) -> GroveConfig:
    """A validated run config, checked as ``grove train`` checks one before loading the model (the schema, every
    component, and what only resolving user code shows: :func:`grove.resolve.resolve`).

    Args:
        source: a YAML file, the dict such a file holds, or a :class:`~grove.config.GroveConfig`; ``None``: the
            defaults (the embedded model on the arithmetic task).
        overrides: ``--set``-style ``"key.path=value"`` strings (a list, or one string), applied after
            ``sections``.
        rewards: the rewards, replacing the config's: each a Python function ``f(prompts, completions,
            **columns) -> list[float | None]`` (TRL's reward-function convention), a registered id
            (``"answer_match"``), an import path, or a ``rewards:`` block whose ``id`` may be a function
            (``{"id": f, "weight": 0.5, "on_error": "zero"}``).
        train_dataset: the task's rows, a ``datasets.Dataset`` or a list of dicts with a prompt column (a string
            or chat messages) and an answer column (see the ``jsonl`` task: ``task: {prompt_column: ...,
            answer_column: ...}`` in the config says which; ``answer_column: null`` for rows without one). Written
            to ``OUTPUT_DIR/data/train.jsonl`` once the config has passed every check (a refused call writes
            nothing).
        eval_dataset: the held-out rows (``OUTPUT_DIR/data/eval.jsonl``); default: ``task.eval_fraction`` of
            ``train_dataset``.
        env: a factory returning an :class:`~grove.envs.EnvironmentSuite` (its parameters in ``env.params`` of the
            config), a registered id, or an ``env`` section whose ``id`` may be a factory.
        **sections: config sections and keys, merged key by key into ``source``: ``train={"steps": 5}``,
            ``output_dir="runs/nb"``, ``model={"name": "smollm2-135m"}``; a ``pathlib.Path`` value is taken as its
            string.

    Raises:
        grove.config.ConfigError: a problem with the config, naming the key and the fix.
    """
    plan, files = checked_config(
        source, overrides=overrides, rewards=rewards, train_dataset=train_dataset, eval_dataset=eval_dataset,
        env=env, **sections,
    )
    for rows in files:
        rows.write()
    return plan.cfg
