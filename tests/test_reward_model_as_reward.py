"""A reward model trained by ``grove rm`` as the ``sequence_classifier`` reward: it reads the text the model was
trained on (the system prompt put back), its standardised outputs come back in label units, and its heads drive a
multi-objective run through the GDPO reward combiner."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import grove
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config
from grove.rewards import resolve_reward
from grove.training.trainer import Trainer

SYSTEM = "You are terse."
WORDS = ["apple", "answer", "think", "fox", "dog", "numbers", "step", "quick"]


def _labelled_rows(n: int) -> list[dict]:
    """Completions of chat prompts that open with the system prompt; head ``good`` is 1 for the marker ending,
    head ``long`` the number of words (a scale far from 0 and 1, so label units differ from standardised ones)."""
    rng = random.Random(0)
    rows = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
        good = i % 2 == 0
        rows.append({
            "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {i} + 1?"}],
            "completion": " ".join(words) + (" 42" if good else " fox"),
            "labels": {"good": float(good), "long": 10.0 + len(words)},
        })
    return rows


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("rm-as-reward")
    tiny = create_tiny_model_dir(root / "tiny", seed=0)
    data = root / "labelled.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _labelled_rows(48)))
    settings = {
        "model.name": tiny, "output_dir": root / "rm", "threads": 1, "rm.data": f"[{data}]", "rm.objective": "regression",
        "rm.heads": "[good, long]", "rm.eval_fraction": 0.25, "rm.steps": 3, "rm.batch_size": 8, "optim.lr": 3e-3,
        "logging.progress": False, "logging.plots": False, "logging.tensorboard": False,
    }
    cfg = load_config(None, [f"{k}={v}" for k, v in settings.items()])
    Trainer(cfg, root / "rm", kind="rm").run()
    return tiny, root / "rm" / "model"


def _by_hand(model_dir: Path, prompts: list[str], completions: list[str]) -> torch.Tensor:
    """The exported model's outputs on the texts it was trained on (system message, user prompt, assistant
    completion through the chat template), in label units: transformers directly, one sample at a time."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    info = model.config.grove_reward_model
    rows = []
    for prompt, completion in zip(prompts, completions, strict=True):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt},
                    {"role": "assistant", "content": completion}]
        ids = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False,
                        return_tensors="pt")["input_ids"]
        with torch.no_grad():
            rows.append(model(input_ids=ids).logits[0])
    return torch.stack(rows) * torch.tensor(info["label_std"]) + torch.tensor(info["label_mean"])


def test_the_reward_scores_a_grove_rm_model_as_it_was_trained(reward_model):
    _tiny, model_dir = reward_model
    prompts = ["What is 3 + 1?", "What is 5 + 1?", "What is 8 + 1?"]
    completions = ["apple think 42", "fox", "step quick dog numbers fox"]
    spec = resolve_reward("sequence_classifier", {"model": str(model_dir), "system_prompt": SYSTEM, "batch_size": 2})
    assert spec.columns == ("good", "long")  # one objective per head, named by id2label
    scored = spec.fn(prompts, completions)
    expected = _by_hand(model_dir, prompts, completions)
    got = torch.tensor([[row["good"], row["long"]] for row in scored])
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert float(got[:, 1].mean()) > 5  # label units: the "long" head's labels are 11..16

    raw = resolve_reward("sequence_classifier", {"model": str(model_dir), "system_prompt": SYSTEM, "label_units": False})
    info = json.loads((model_dir / "config.json").read_text())["grove_reward_model"]
    standardised = (expected - torch.tensor(info["label_mean"])) / torch.tensor(info["label_std"])
    torch.testing.assert_close(torch.tensor([[r["good"], r["long"]] for r in raw.fn(prompts, completions)]),
                               standardised, atol=1e-4, rtol=1e-4)


def test_a_grove_rm_model_drives_a_gdpo_run(reward_model, tmp_path):
    tiny, model_dir = reward_model
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(20)]
    run = grove.train(
        model={"name": str(tiny)},
        rewards=[{"id": "sequence_classifier", "model": str(model_dir), "system_prompt": SYSTEM},
                 {"id": "answer_match", "extract": "last_number", "weight": 0.0}],  # the rule, logged beside
        train_dataset=rows,
        algorithm={"preset": "gdpo"},
        rollout={"system_prompt": SYSTEM, "max_new_tokens": 4},
        train={"steps": 2, "prompts_per_step": 2, "completions_per_prompt": 4},
        eval={"accuracy_reward": "answer_match"},
        output_dir=str(tmp_path / "run"), threads=1, logging={"progress": False, "tensorboard": False},
    )
    last = run.metrics[-1]
    assert {"objective/good/advantage_abs_mean", "objective/long/advantage_abs_mean"} <= set(last)
    assert last["reward/long_mean"] > 5  # the reward model's head, in label units
    assert run.summary["after"]["total"] == 2


def test_the_clinical_rl_example_reads_its_reward_model_as_it_was_trained(reward_model):
    """examples/clinical_rm_gdpo.yaml loads, trains on the reward model's heads beside the logged rules, and gives the
    reward the system prompt the reward model's rows carried (the policy's own)."""
    _tiny, model_dir = reward_model
    root = Path(__file__).resolve().parent.parent / "examples"
    cfg = load_config(root / "clinical_rm_gdpo.yaml", [f"rewards.0.model={model_dir}", "rewards.0.heads=null"])
    rm_cfg = load_config(root / "reward_model_clinical.yaml")
    assert cfg.rewards[0].params["system_prompt"] == cfg.rollout.system_prompt == rm_cfg.rollout.system_prompt
    assert cfg.rewards[1].id == "clinical_objectives" and cfg.rewards[1].weight == 0.0
    assert cfg.algorithm.reward_combination.id == "normalize_then_sum"


def test_a_reward_model_trained_from_python(tmp_path):
    tiny = create_tiny_model_dir(tmp_path / "tiny", seed=0)
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _labelled_rows(24)))
    run = grove.train(
        kind="rm", model={"name": str(tiny)}, output_dir=str(tmp_path / "rm"), threads=1,
        rm={"data": [str(data)], "objective": "regression", "heads": ["good", "long"], "steps": 2, "batch_size": 8},
        logging={"progress": False, "tensorboard": False},
    )
    assert run.summary["heads"] == ["good", "long"] and (run.run_dir / "model" / "config.json").is_file()
    assert resolve_reward("sequence_classifier", {"model": str(run.run_dir / "model")}).columns == ("good", "long")
