"""The run configuration: one YAML file, validated by pydantic.

* :mod:`~grove.config.schema`: :class:`GroveConfig`, the root, with the rules across its sections (which
  components exist and what they require is checked for a run: :mod:`grove.resolve`);
  :mod:`~grove.config.sections` and :mod:`~grove.config.algorithm`: its sections; :mod:`~grove.config.components`: ``{id: ..., params}``
  component blocks checked against a registry;
* :mod:`~grove.config.reward_columns`: the reward-matrix columns a ``rewards:`` block fills;
* :mod:`~grove.config.derived`: what the config implies (the reference model, the bf16 generation copy);
* :mod:`~grove.config.loading`: YAML, ``--set`` overrides, presets, readable error messages;
* :mod:`~grove.config.presets`: the paper presets.

Every key is documented in ``docs/config.md``.
"""

from grove.config.components import ComponentSpec
from grove.config.loading import (
    ConfigError,
    apply_overrides,
    config_from_data,
    dump_config,
    format_validation_error,
    read_config,
    read_config_data,
)
from grove.config.schema import GroveConfig

__all__ = [
    "ComponentSpec",
    "ConfigError",
    "GroveConfig",
    "apply_overrides",
    "config_from_data",
    "dump_config",
    "format_validation_error",
    "read_config",
    "read_config_data",
]
