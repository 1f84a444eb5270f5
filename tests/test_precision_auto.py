"""``train.precision: auto``: bf16 only where the device multiplies bfloat16 natively."""

from __future__ import annotations

import pytest

import grove.infra.precision as precision
from grove.config import dump_config
from grove.resolve import load_config


@pytest.mark.parametrize(("native", "expected"), [(True, "bf16"), (False, "fp32")])
def test_auto_resolves_by_the_hardware_and_the_run_records_the_choice(monkeypatch, native, expected):
    seen = []
    monkeypatch.setattr(precision, "native_bf16_products", lambda device: seen.append(str(device)) or native)
    cfg = load_config(None, ["train.precision=auto", "distributed.device=cpu"])
    assert cfg.train.precision == expected
    assert seen == ["cpu"]
    assert f"precision: {expected}" in dump_config(cfg)


def test_an_explicit_precision_is_kept(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16_products", lambda device: pytest.fail("not asked"))
    assert load_config(None, ["train.precision=bf16"]).train.precision == "bf16"
    assert load_config(None, []).train.precision == "fp32"
