"""The 'Adding a new estimator' example in docs/components.md works verbatim, from YAML, with no trainer edit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from grove.config import ConfigError, load_config

DOC = Path(__file__).parent.parent / "docs" / "components.md"


def example_source() -> str:
    section = DOC.read_text().split("## Adding a new estimator", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_documented_estimator_trains_through_the_cli(tmp_path, monkeypatch):
    (tmp_path / "my_doc_estimators.py").write_text(example_source())
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["imports=[my_doc_estimators]", "algorithm.advantage={id: median_baseline, scale: 2.0}"])
    from grove.registry import ADVANTAGE_ESTIMATORS

    # hand-computed: group 0 scores [1, 0, 0, 1] -> lower median 0 -> (r - 0) / 2; group 1 [3, 5, 4] -> median 4
    from test_core_advantages import make_test_batch

    batch = make_test_batch([0, 0, 0, 0, 1, 1, 1], [2] * 7)
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 5.0, 4.0])
    adv = ADVANTAGE_ESTIMATORS.get("median_baseline")(batch, scores, cfg.algorithm.advantage.validated(ADVANTAGE_ESTIMATORS))
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.5, 0.0, 0.0, 0.5, -0.5, 0.5, 0.0]))

    from grove.models.tiny import create_tiny_model_dir
    from test_train_e2e import base_overrides, run_cli

    model = create_tiny_model_dir(tmp_path / "tiny")
    out = tmp_path / "run"
    args = base_overrides(model, out, **{"train.steps": 1, "imports": "[my_doc_estimators]",
                                         "algorithm.advantage": "{id: median_baseline}"})
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


def test_unimportable_module_is_a_clear_error():
    try:
        load_config(None, ["imports=[no_such_module_xyz]"])
    except ConfigError as exc:
        assert "imports" in str(exc) and "no_such_module_xyz" in str(exc)
    else:
        raise AssertionError("expected a ConfigError")
