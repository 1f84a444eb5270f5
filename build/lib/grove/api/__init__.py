"""grove from Python: build a config, train, evaluate and read a run back, with Python objects where a config
names code or data.

* :func:`make_config`: a validated config from a YAML file, a dict or keyword sections, with Python reward
  functions, an environment factory and in-memory rows (:mod:`grove.api.config_building`);
* :func:`train`: the run ``grove train`` / ``grove sft`` makes, in this process (:mod:`grove.api.training`);
* :func:`evaluate`: what ``grove eval`` reports (:mod:`grove.api.evaluation`);
* :func:`load_run` / :class:`Run`: a run directory's config, summary, metrics, samples and model
  (:mod:`grove.api.run_results`).

The same names are at the package top level: ``grove.train``, ``grove.make_config``, ...
"""

from grove.api.config_building import make_config
from grove.api.evaluation import evaluate
from grove.api.run_results import Run, load_run
from grove.api.training import train

__all__ = ["Run", "evaluate", "load_run", "make_config", "train"]
