"""``model.init_from``: a run starts from another run's weights (its final model, its newest intact checkpoint, a
checkpoint, a model directory; LoRA adapters merged), and the ``nll`` loss of supervised fine-tuning."""

from __future__ import annotations

import shutil

import pytest
import torch
from tests.tiny_runs import full_and_lora_runs, run_config, same_weights, weights

from grove.config import ConfigError
from grove.core.losses import PolicyLossInput
from grove.infra import checkpoint as ckpt
from grove.models.initial_weights import initial_model_dir, policy_source
from grove.models.pretrained import ModelLoadError, load_policy
from grove.registry import POLICY_LOSSES
from grove.resolve import resolve
from grove.training.trainer import Trainer


def test_nll_is_the_negative_log_likelihood_of_the_loss_tokens():
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    out = POLICY_LOSSES.get("nll")(
        PolicyLossInput(logprobs=logprobs, old_logprobs=logprobs + 5, advantages=-torch.ones(2, 2), loss_mask=mask),
        None,
    )
    assert torch.equal(out.token_loss, torch.tensor([[1.0, 0.0], [0.5, 3.0]]))  # advantages and ratios not read


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return full_and_lora_runs(tmp_path_factory.mktemp("init_from"))


def _state(path) -> dict[str, torch.Tensor]:
    model, _ = load_policy(path)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_a_run_directory_means_its_newest_intact_checkpoint(runs, tmp_path):
    tiny, full, _ = runs
    assert initial_model_dir(str(full)) == ckpt.checkpoint_dir(full, 2) / "model"
    assert initial_model_dir(str(ckpt.checkpoint_dir(full, 1))) == ckpt.checkpoint_dir(full, 1) / "model"
    assert initial_model_dir(str(tiny)) == tiny
    assert policy_source("smollm2-135m", None) == "smollm2-135m"
    loaded = _state(policy_source(str(tiny), str(full)))
    saved = weights(full, 2)
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)
    damaged = shutil.copytree(full, tmp_path / "damaged")  # the newest checkpoint damaged: the one before it
    (ckpt.checkpoint_dir(damaged, 2) / "model" / "model.safetensors").write_bytes(b"not weights")
    assert initial_model_dir(str(damaged)) == ckpt.checkpoint_dir(damaged, 1) / "model"


def test_a_run_s_final_model_comes_first(runs, tmp_path):
    _, full, _ = runs
    run = shutil.copytree(full, tmp_path / "run")
    shutil.copytree(ckpt.checkpoint_dir(run, 1) / "model", run / "model")
    assert initial_model_dir(str(run)) == run / "model"


def test_a_lora_run_is_merged_into_its_base_once(runs, tmp_path, monkeypatch):
    from grove.models.merged_export import export_merged

    monkeypatch.setenv("GROVE_CACHE", str(tmp_path / "cache"))
    _, _, lora = runs
    merged = policy_source("ignored", str(lora))
    assert (tmp_path / "cache" / "merged") in __import__("pathlib").Path(merged).parents
    expected = export_merged(ckpt.checkpoint_dir(lora, 2), tmp_path / "exported")
    assert same_weights(_state(merged), _state(expected))
    assert policy_source("ignored", str(lora)) == merged  # cached


def test_nothing_to_start_from_is_a_config_error_naming_the_key(runs, tmp_path):
    tiny, full, _ = runs
    with pytest.raises(ModelLoadError, match="model.init_from .*no such directory"):
        initial_model_dir(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="holds no model"):
        initial_model_dir(str(tmp_path / "empty"))
    cfg = run_config(tiny, tmp_path / "out", 1, **{"model.init_from": str(tmp_path / "empty")})
    with pytest.raises(ConfigError, match="model.init_from"):
        resolve(cfg)


def test_training_from_a_run_starts_from_its_weights_and_regularises_towards_them(runs, tmp_path):
    tiny, full, _ = runs
    cfg = run_config(tiny, tmp_path / "rl", 1, **{"model.init_from": str(full), "algorithm.kl.coef": 0.1})
    trainer = Trainer(cfg, tmp_path / "rl")
    saved = weights(full, 2)
    policy = trainer.models.causal_lm.state_dict()
    reference = trainer.models.reference.state_dict()
    assert all(torch.equal(policy[k], saved[k]) for k in saved)
    assert all(torch.equal(reference[f"causal_lm.{k}"], saved[k]) for k in saved)
