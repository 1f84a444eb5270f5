"""``grove.evaluate``: a model's held-out accuracy (or an environment's success rate) from Python, as ``grove eval``
reports it: greedy, and sampled with pass@k when asked, each with its 95% interval.

:func:`load_model` and :func:`evaluate_loaded` are the two halves ``grove eval`` runs too.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grove.api.config_building import ConfigSource, config_data
from grove.api.progress_bars import library_progress_bars_off
from grove.api.run_results import Run, trained_model_dir
from grove.config import ConfigError

if TYPE_CHECKING:
    from grove.config import GroveConfig
    from grove.evaluation.evaluate import EvalResult
    from grove.resolve import RunPlan

__all__ = ["evaluate", "evaluate_loaded", "load_model"]


def _is_run_or_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a run or checkpoint directory rather than a model directory."""
    if (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
        return False
    return (path / "config.yaml").is_file() or (path / "checkpoints").is_dir() or (path / "model").is_dir()


def model_source(model: str) -> str:
    """What to load for ``model``: a run or checkpoint directory's trained model
    (:func:`grove.api.run_results.trained_model_dir`), else ``model`` itself (a model directory or an embedded
    name)."""
    path = Path(model).expanduser()
    return str(trained_model_dir(model, "model")) if path.is_dir() and _is_run_or_checkpoint(path) else model


def load_model(cfg: GroveConfig, model: str | None, loaded: dict[str, tuple]) -> tuple[str, tuple]:
    """``model`` (a model, run or checkpoint directory or an embedded name; default: the config's policy,
    ``model.init_from`` applied) and its ``(policy, tokenizer)``, loaded once per name into ``loaded``."""
    from grove.infra.runtime import configure_runtime
    from grove.models.initial_weights import policy_source
    from grove.models.pretrained import load_policy

    configure_runtime(**cfg.runtime_settings())
    name = model_source(model) if model is not None else policy_source(cfg.model.name, cfg.model.init_from)
    if name not in loaded:
        loaded[name] = load_policy(name)
    return name, loaded[name]


def evaluate_loaded(config: GroveConfig | RunPlan, policy: Any, tokenizer: Any) -> EvalResult:
    """The held-out evaluation of ``config`` (its task and rewards, or its environment) with a loaded policy; a
    config is resolved for evaluation by the front door first (:func:`grove.resolve.resolve`)."""
    from grove.experience import SourceContext, build_experience_source
    from grove.resolve import RunPlan, resolve
    from grove.rollout_engines import build_rollout_engine

    plan = config if isinstance(config, RunPlan) else resolve(config, "eval")
    engine = build_rollout_engine(plan.cfg.rollout, policy, tokenizer, plan.entries.rollout_engine)
    return build_experience_source(SourceContext.for_evaluation(plan, engine, tokenizer)).evaluate()


def evaluate(
    config: ConfigSource | Run = None,
    *,
    model: str | Path | Mapping[str, Any] | None = None,
    rewards: Sequence[Callable[..., Any] | str | Mapping[str, Any]] | None = None,
    eval_dataset: Any = None,
    env: Callable[..., Any] | str | Mapping[str, Any] | None = None,
    max_examples: int | None = None,
    samples: int | None = None,
    overrides: Sequence[str] | None = None,
    **sections: Any,
) -> EvalResult:
    """Evaluate ``model`` on the held-out items of ``config``'s task (or episodes of its environment).

    Args:
        config: a config source as for :func:`grove.make_config`, or a :class:`~grove.api.run_results.Run`: its
            config, and by default its trained model.
        model: a model directory, a run directory (its trained model: ``model/``, else its newest checkpoint's, a
            LoRA adapter merged into its base), a checkpoint directory or its ``model/``, or an embedded model name;
            default: the run's trained model (``config`` a run), else the config's policy. A dict is the config's
            ``model`` section, as in :func:`grove.train` (``model={"name": ...}``).
        rewards, env, overrides, sections: as for :func:`grove.make_config`.
        eval_dataset: rows to evaluate on (a ``datasets.Dataset`` or a list of dicts) instead of the task's
            held-out split.
        max_examples: evaluate at most this many items.
        samples: also sample this many completions per item (sampled accuracy and pass@k).

    Returns:
        The result: ``result.report`` (accuracy, correct, total, ``ci_low``, ``ci_high``), ``result.extra``
        (per objective, sampled accuracy, pass@k), ``result.samples`` and ``result.record()`` as one dict.

    Raises:
        grove.config.ConfigError: a problem with an argument or the config, naming it.
        grove.models.pretrained.ModelLoadError: ``model`` cannot be loaded (a run without a trained model, a
            missing or corrupt model), naming it.
    """
    from grove.config import config_from_data
    from grove.resolve import resolve

    if isinstance(model, Mapping):
        sections["model"], model = model, None
    elif model is not None and (not isinstance(model, str | os.PathLike) or not os.fspath(model)):
        raise ConfigError(
            f"model: expected a model directory, a run directory or an embedded model name (a str or Path), or a "
            f"dict (the config's model section), got {type(model).__name__} {model!r}"
        )
    if isinstance(config, Run):
        if model is None:
            model = config.model_dir
        config = config.run_dir / "config.yaml"
    evaluation = {"max_examples": max_examples, "samples": samples}
    evaluation = {k: v for k, v in evaluation.items() if v is not None}
    if evaluation:
        sections["eval"] = {**sections.get("eval", {}), **evaluation}
    with tempfile.TemporaryDirectory(prefix="grove-eval-") as scratch, library_progress_bars_off():
        if eval_dataset is not None:  # the rows as both splits of a task that lives for this call
            sections["output_dir"] = scratch
        data, files = config_data(
            config, overrides=overrides, rewards=rewards, train_dataset=eval_dataset, eval_dataset=eval_dataset,
            env=env, **sections,
        )
        plan = resolve(config_from_data(data), "eval")  # the config's mistakes before anything is written or loaded
        for rows in files:  # into the scratch directory
            rows.write()
        _name, (policy, tokenizer) = load_model(plan.cfg, None if model is None else os.fspath(model), {})
        return evaluate_loaded(plan, policy, tokenizer)
