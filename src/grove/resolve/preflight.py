"""The last checks of the front door (:func:`grove.resolve.resolve`): everything a config names that can be resolved
without the model's weights.

The schema checks types and ranges, the front door the registered components. What neither can see without
importing or building user code is checked here, by the same code the run uses, so that a mistake costs seconds
rather than a model load and comes out as one ``error:`` line naming the key:

* each ``rewards:`` block resolves (the module imports, the function exists, a user function is given no
  ``params``, a registered reward's parameters validate, a reward under ``isolation: process`` pickles);
* a user environment factory (``env.id: package.module:factory``) imports and builds its suite from
  ``env.params`` (a registered environment's parameters were validated with the config);
* ``model.init_from`` designates a run, checkpoint or model directory (:mod:`grove.models.initial_weights`);
* ``model.name`` resolves to a model directory, and ``model.lora.target_modules`` each match a module of that
  model (checked on a weightless copy built from its ``config.json``).

Every run resolves its config through the front door before loading the model, and ``grove config show`` does the
same, so both report the same mistakes the same way. The rewards resolved here are the ones the run calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from grove.config import ConfigError, GroveConfig
from grove.user_code import UserCodeExit, user_code

if TYPE_CHECKING:
    from grove.resolve.component_lookups import Resolved
    from grove.rewards.scoring import RewardSpec

__all__ = ["preflight"]


def preflight(cfg: GroveConfig, reward_entries: Sequence[Resolved | None]) -> list[RewardSpec]:
    """Raise :class:`ConfigError` naming the key for the first mistake found (see the module docstring); the
    rewards of a run of single-turn completions, resolved with their looked-up ``reward_entries``."""
    if cfg.model.init_from is not None:
        _check_init_from(cfg)
    rewards = _resolved_rewards(cfg, reward_entries) if cfg.source_id == "completions" else []
    if cfg.env is not None and ":" in cfg.env.id:
        _check_user_environment(cfg)
    if cfg.model.lora is not None:
        _check_lora_targets(cfg)
    return rewards


def _check_init_from(cfg: GroveConfig) -> None:
    from grove.models.initial_weights import initial_model_dir
    from grove.models.pretrained import ModelLoadError

    try:
        initial_model_dir(cfg.model.init_from)
    except ModelLoadError as exc:
        raise ConfigError(str(exc)) from None


def _policy_path(cfg: GroveConfig) -> Any:
    from grove.models.initial_weights import policy_source
    from grove.models.pretrained import resolve_model_path

    return resolve_model_path(policy_source(cfg.model.name, cfg.model.init_from))


def _resolved_rewards(cfg: GroveConfig, reward_entries: Sequence[Resolved | None]) -> list[RewardSpec]:
    from grove.rewards.scoring import RewardLoadError, resolve_rewards

    rewards: list[RewardSpec] = []
    for i, (reward, resolved) in enumerate(zip(cfg.rewards, reward_entries, strict=True)):
        try:
            with user_code(f"importing reward {reward.id!r}"):  # its worker, if any, starts at the first call
                rewards += resolve_rewards([reward], [resolved.entry if resolved is not None else None])
        except (RewardLoadError, UserCodeExit) as exc:
            raise ConfigError(f"rewards.{i}: {exc}") from None
    return rewards


def _check_user_environment(cfg: GroveConfig) -> None:
    from grove.envs import build_environment

    env = cfg.env
    assert env is not None
    try:
        with user_code(f"environment factory {env.id!r}"):
            build_environment(env.id, env.params, tokenizer=_tokenizer(cfg))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user factory may raise anything; each is the config's problem
        detail = str(exc) if isinstance(exc, ValueError | UserCodeExit) else f"{type(exc).__name__}: {exc}"
        raise ConfigError(
            f"env: cannot build environment {env.id!r} with env.params {env.params}: {detail}"
        ) from None


def _tokenizer(cfg: GroveConfig) -> Any:
    """The policy's tokenizer, for factories that budget observations in tokens (loading it reads no weights);
    ``None`` where it cannot be read here (the model load then reports why)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(_policy_path(cfg), local_files_only=True)
    except Exception:  # noqa: BLE001 - not this check's to report
        return None


def _check_lora_targets(cfg: GroveConfig) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from grove.models.lora import adapter_parameter_count
    from grove.vision.families import is_vision_language

    lora = cfg.model.lora
    assert lora is not None
    try:
        config = AutoConfig.from_pretrained(_policy_path(cfg), local_files_only=True)
    except Exception:  # noqa: BLE001 - an unreadable model is the model load's to report, with its own message
        return
    auto_class = AutoModelForCausalLM
    if is_vision_language(config):
        from transformers import AutoModelForImageTextToText as auto_class
    with torch.device("meta"):  # the module tree without weights
        skeleton = auto_class.from_config(config)
    try:
        adapter_parameter_count(skeleton, lora)
    except ValueError as exc:
        raise ConfigError(f"model.lora.target_modules: {exc}") from None
