"""From a config to a run: the config checked against the registries and the user's code, and the components it
names, looked up once.

* :func:`load_config`: read a YAML config with ``--set`` overrides (:func:`grove.config.read_config`) and check it
  for a run (:func:`check_config`): what the CLI, the trainer, ``grove eval`` and the benchmarks load;
* :func:`check_config`: the checks of :mod:`grove.resolve.component_checks` on a config built in code;
* :func:`resolve_components`: the typed set of components a run uses (:class:`RunComponents`).

Importing this package registers every built-in component.
"""

from grove.resolve.run_components import RunComponents, resolve_components
from grove.resolve.run_config import check_config, load_config

__all__ = ["RunComponents", "check_config", "load_config", "resolve_components"]
