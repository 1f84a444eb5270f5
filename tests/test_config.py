"""Config validation: defaults, overrides, derived quantities, and error messages that name the key."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from grove.config import ConfigError, GroveConfig, apply_overrides, dump_config
from grove.resolve import load_config


def write(tmp_path, text: str):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_validate():
    cfg = GroveConfig()
    assert cfg.algorithm.advantage.id == "grpo"
    assert cfg.train.completions_per_step == 64


def test_example_config_loads():
    cfg = load_config("examples/arithmetic.yaml")
    assert cfg.model.name == "smollm2-135m"
    assert cfg.task.id == "arithmetic"


def test_overrides_nested_list_and_yaml_values(tmp_path):
    p = write(tmp_path, "rewards:\n  - {id: answer_match, weight: 1.0}\n")
    cfg = load_config(p, ["train.steps=7", "rewards.0.weight=2.5", 'rollout.stop=["\\n\\n"]', "optim.lr=3e-6"])
    assert cfg.train.steps == 7
    assert cfg.rewards[0].weight == 2.5
    assert cfg.rollout.stop == ["\n\n"]
    assert cfg.optim.lr == pytest.approx(3e-6)


def test_override_without_equals_is_an_error():
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_overrides({}, ["train.steps"])


def test_override_bad_list_index():
    with pytest.raises(ConfigError, match="not an index"):
        apply_overrides({"rewards": [{"id": "x"}]}, ["rewards.3.weight=1"])


def test_unknown_key_names_key_and_allowed_values(tmp_path):
    p = write(tmp_path, "train:\n  promts_per_step: 4\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "train.promts_per_step" in msg
    assert "prompts_per_step" in msg  # suggestion and the allowed list
    assert "completions_per_prompt" in msg


def test_wrong_type_names_key(tmp_path):
    p = write(tmp_path, "train:\n  steps: many\n")
    with pytest.raises(ConfigError, match="train.steps"):
        load_config(p)


def test_literal_names_allowed_values(tmp_path):
    p = write(tmp_path, "optim:\n  schedule: linear\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "optim.schedule" in str(e.value) and "cosine" in str(e.value)


def test_unknown_component_lists_registry(tmp_path):
    p = write(tmp_path, "algorithm:\n  advantage: {id: grpoo}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "grpoo" in msg and "Did you mean 'grpo'" in msg and "rloo" in msg


def test_component_param_validated_against_registered_model(tmp_path):
    p = write(tmp_path, "algorithm:\n  policy_loss: {id: ppo_clip, clip_hi: 0.3}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert "clip_hi" in msg and "clip_high" in msg


def test_aggregation_accepts_verl_spelling_and_rejects_unknown(tmp_path):
    cfg = load_config(None, ["algorithm.aggregation=seq-mean-token-sum-norm"])
    assert cfg.algorithm.aggregation == "seq_mean_token_sum_norm"
    with pytest.raises(ConfigError, match="algorithm.aggregation"):
        load_config(None, ["algorithm.aggregation=sum"])


def test_mini_batches_must_divide(tmp_path):
    with pytest.raises(ConfigError, match="train.mini_batches"):
        load_config(None, ["train.prompts_per_step=3", "train.completions_per_prompt=3", "train.mini_batches=2"])


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "train: [1,\n"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n"))


def test_yaml_is_loaded_safely(tmp_path):
    p = write(tmp_path, "seed: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)


def test_derived_quantities():
    cfg = load_config(
        None,
        ["train.prompts_per_step=4", "train.completions_per_prompt=8", "train.mini_batches=2",
         "train.micro_batch_size=4", "train.ppo_epochs=3", "train.steps=10"],
    )
    d = cfg.derived()
    assert d["completions_per_step"] == 32
    assert d["mini_batch_size (completions per optimizer step)"] == 16
    assert d["gradient_accumulation_steps"] == 4
    assert d["optimizer_steps_per_rollout"] == 6
    assert d["total_optimizer_steps"] == 60


def test_reward_names_unique_and_accuracy_reward(tmp_path):
    with pytest.raises(ConfigError, match="names must be unique"):
        load_config(None, ["rewards=[{id: answer_match}, {id: answer_match}]"])
    with pytest.raises(ConfigError, match="eval.accuracy_reward"):
        load_config(None, ["eval.accuracy_reward=nope"])


def test_preset_expands_and_user_keys_win(tmp_path):
    cfg = load_config(None, ["algorithm.preset=dapo"])
    a = cfg.algorithm
    assert a.policy_loss.params == {"clip_low": 0.2, "clip_high": 0.28}
    assert a.dynamic_sampling.enabled and a.overlong.soft_penalty and a.aggregation == "token_mean"
    p = write(tmp_path, "algorithm:\n  preset: dapo\n  policy_loss: {clip_high: 0.3}\n  kl: {coef: 0.01}\n")
    cfg = load_config(p, ["algorithm.dynamic_sampling.max_rounds=5"])
    a = cfg.algorithm
    assert a.policy_loss.id == "ppo_clip" and a.policy_loss.params == {"clip_low": 0.2, "clip_high": 0.3}
    assert a.kl.coef == 0.01 and a.dynamic_sampling.max_rounds == 5 and a.dynamic_sampling.enabled


def test_preset_component_with_other_id_is_taken_whole():
    cfg = load_config(None, ["algorithm.preset=dapo", "algorithm.advantage={id: rloo}"])
    assert cfg.algorithm.advantage.id == "rloo" and cfg.algorithm.advantage.params == {}


def test_two_grpo_preset_sets_group_size_and_unknown_preset_errors():
    assert load_config(None, ["algorithm.preset=two_grpo"]).train.completions_per_prompt == 2
    with pytest.raises(ConfigError, match="unknown preset 'dappo'.*dapo"):
        load_config(None, ["algorithm.preset=dappo"])


def test_every_preset_validates():
    from grove.config.presets import PRESETS

    for name in PRESETS:
        assert load_config(None, [f"algorithm.preset={name}"]).algorithm.preset == name


@pytest.mark.parametrize("name", ["frozenlake_gigpo", "textworld_gigpo", "sokoban_gigpo", "taxi_gigpo", "cliffwalking_gigpo", "openenv_gigpo",
                                  "gymnasium_frozenlake_gigpo", "textarena_gigpo"])
def test_agent_examples_load(name):
    cfg = load_config(f"examples/{name}.yaml")
    assert cfg.source_id == "environment" and cfg.algorithm.advantage.id == "gigpo"


@pytest.mark.parametrize("name", ["shapes_vlm_sft", "shapes_vlm_grpo"])
def test_vision_language_examples_load(name):
    cfg = load_config(f"examples/{name}.yaml")
    assert cfg.task.id == "shapes" and cfg.rewards[0].id == "picture_answer"


def test_a_gated_combination_naming_no_objective_is_refused_when_the_config_loads():
    settings = ['rewards=[{id: answer_match}, {id: answer_format}]',
                'algorithm.reward_combination={id: gated, constraints: [answer_match], objectives: [tone]}']
    with pytest.raises(ConfigError, match="reward_combination.objectives: 'tone' is not an objective"):
        load_config(None, settings)
    cfg = load_config(None, [settings[0], settings[1].replace("tone", "answer_format")])
    assert cfg.algorithm.reward_combination.id == "gated"


def _loaded_with_warnings(caplog, path, overrides):
    """The config and the deprecation warnings its loading logged."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="grove.config"):
        cfg = load_config(path, overrides)
    return cfg, [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]


@pytest.mark.parametrize(
    ("text", "overrides"),
    [
        ("algorithm:\n  {key}: {{id: normalize_then_sum, renormalize: none}}\n", []),
        ("algorithm:\n  preset: gdpo\n  {key}: {{renormalize: none}}\n", []),  # over the preset's own key
        ("", ["algorithm.{key}={{id: gated, constraints: [answer_match]}}"]),
    ],
)
def test_the_deprecated_reward_aggregation_key_loads_as_reward_combination(tmp_path, caplog, text, overrides):
    """``algorithm.reward_aggregation`` is read as ``algorithm.reward_combination`` (the same config, one warning
    naming the key to write); the current key warns about nothing."""
    def load(key):
        path = write(tmp_path, text.format(key=key)) if text else None
        return _loaded_with_warnings(caplog, path, [o.format(key=key) for o in overrides])

    old, warnings = load("reward_aggregation")
    new, none = load("reward_combination")
    assert old == new and dump_config(old) == dump_config(new)
    assert "reward_aggregation" not in dump_config(old)
    assert len(warnings) == 1 and "algorithm.reward_combination" in warnings[0], warnings
    assert none == []


def test_the_deprecated_reward_aggregation_key_with_reward_combination_is_an_error(tmp_path):
    both = "algorithm:\n  reward_aggregation: {id: gated}\n  reward_combination: {id: gated}\n"
    for load in (lambda: load_config(write(tmp_path, both)),
                 lambda: load_config(None, ["algorithm.reward_aggregation={id: gated}",
                                            "algorithm.reward_combination={id: gated}"])):
        with pytest.raises(ConfigError) as raised:
            load()
        assert "algorithm.reward_aggregation" in str(raised.value)
        assert "algorithm.reward_combination" in str(raised.value)
    with pytest.raises(ValidationError, match="algorithm.reward_aggregation and algorithm.reward_combination"):
        GroveConfig.model_validate({"algorithm": {"reward_aggregation": {"id": "gated"},
                                                  "reward_combination": {"id": "gated"}}})


def test_a_config_built_in_code_reads_the_deprecated_key_too(caplog):
    with caplog.at_level(logging.WARNING, logger="grove.config"):
        cfg = GroveConfig.model_validate({"algorithm": {"reward_aggregation": {"id": "ensemble_min"}}})
    assert cfg.algorithm.reward_combination.id == "ensemble_min"
    assert [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()] == [
        "algorithm.reward_aggregation is deprecated: write algorithm.reward_combination (same value)"
    ]
