"""The run configuration: one YAML file, validated by pydantic.

* :mod:`~grove.config.schema`: :class:`GroveConfig`, the root; :mod:`~grove.config.sections` and
  :mod:`~grove.config.algorithm`: its sections; :mod:`~grove.config.components`: ``{id: ..., params}``
  component blocks checked against a registry;
* :mod:`~grove.config.validation`: the checks that span several sections;
* :mod:`~grove.config.derived`: quantities the config implies (batch sizes, the reference model);
* :mod:`~grove.config.loading`: YAML, ``--set`` overrides, presets, readable error messages;
* :mod:`~grove.config.presets`: the paper presets.

Every key is documented in ``docs/config.md``.
"""

from grove.config.components import ComponentSpec
from grove.config.loading import (
    ConfigError,
    apply_overrides,
    dump_config,
    format_validation_error,
    load_config,
)
from grove.config.schema import GroveConfig

__all__ = [
    "ComponentSpec",
    "ConfigError",
    "GroveConfig",
    "apply_overrides",
    "dump_config",
    "format_validation_error",
    "load_config",
]
