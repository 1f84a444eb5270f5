"""From a config to a run: the front door every kind of run comes through.

* :func:`resolve`: a config checked and resolved once for a kind of run (``train``, ``sft``, ``rm``, ``eval``):
  a :class:`RunPlan` holding every component the run uses, looked up once, with what they imply
  (:mod:`grove.resolve.run_plan`);
* :func:`load_config`: read a YAML config with ``--set`` overrides (:func:`grove.config.read_config`) and check it
  (:func:`check_config`: the front door without resolving user code or model files).

Importing this package registers every built-in component.
"""

from grove.resolve.run_components import RunComponents
from grove.resolve.run_config import check_config, load_config
from grove.resolve.run_entries import RunEntries, RunKind
from grove.resolve.run_plan import ModelNeeds, RunPlan, resolve

__all__ = ["ModelNeeds", "RunComponents", "RunEntries", "RunKind", "RunPlan", "check_config", "load_config", "resolve"]
