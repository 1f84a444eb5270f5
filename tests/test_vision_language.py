"""Vision-language policies on tiny random models (LLaVA-style and Idefics3): the image table, prompts with images,
the rollout engine's prefill with pixels, the training forward (on-policy ratio 1), and whole runs with a checkpoint
and an exact resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from grove.batch import RolloutBatch, concat_batches
from grove.models.forward_layouts import layout_logprobs
from grove.models.pretrained import ModelLoadError, load_policy
from grove.models.tiny_vision import create_tiny_vision_model_dir
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine
from grove.rollout.prompt_encoding import encode_prompt_batch
from grove.rollout.prompt_rows import DistinctPrompts, left_pad
from grove.vision.image_prompts import ImagePromptError, encode_image_prompts
from grove.vision.image_table import ImageTable
from grove.vision.processors import processor_of

FAMILIES = ("llava", "idefics3")


def _table(rows_per_image: list[int], owners: list[int], num_owners: int) -> ImageTable:
    """Image ``i`` has ``rows_per_image[i]`` rows whose pixel value is ``10 * i + row``."""
    values = torch.cat([10 * i + torch.arange(n, dtype=torch.float32) for i, n in enumerate(rows_per_image)])
    return ImageTable({"pixels": values[:, None]}, {"size": torch.arange(len(owners))[:, None]},
                      torch.tensor(owners), torch.tensor(rows_per_image), num_owners)


def test_image_table_select_repeats_and_reorders_owners() -> None:
    # owner 0: images 0 (2 rows) and 1 (1 row); owner 1: none; owner 2: image 2 (3 rows)
    table = _table([2, 1, 3], [0, 0, 2], 3)
    picked = table.select([2, 0, 1, 0])
    assert picked.owner.tolist() == [0, 1, 1, 3, 3]
    assert picked.rows.tolist() == [3, 2, 1, 2, 1]
    assert picked.row_tensors["pixels"].flatten().tolist() == [20, 21, 22, 0, 1, 10, 0, 1, 10]
    assert picked.image_tensors["size"].flatten().tolist() == [2, 0, 1, 0, 1]
    assert picked.images_per_owner().tolist() == [1, 2, 0, 2]
    assert table.select([1]).num_images == 0


def test_image_table_of_owners_shifts_owners_past_tables_and_gaps() -> None:
    a, b = _table([1], [1], 2), _table([2], [0], 1)
    joined = ImageTable.of_owners([a, None, b], [2, 3, 1])
    assert joined.num_owners == 6 and joined.owner.tolist() == [1, 5]
    assert joined.row_tensors["pixels"].flatten().tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="non-decreasing"):
        ImageTable({"pixels": torch.zeros(2, 1)}, {}, torch.tensor([1, 0]), torch.ones(2, dtype=torch.long), 2)


def test_image_table_fingerprints_tell_images_apart() -> None:
    table = ImageTable({"pixels": torch.tensor([[1.0], [2.0], [1.0]])}, {}, torch.tensor([0, 1, 2]),
                       torch.ones(3, dtype=torch.long), 4)
    prints = table.fingerprints().tolist()
    assert prints[0] == prints[2] != prints[1] and prints[3] == 0 and prints[0] != 0


@pytest.fixture(scope="module", params=FAMILIES)
def vlm(request, tmp_path_factory):
    path = create_tiny_vision_model_dir(tmp_path_factory.mktemp(request.param), family=request.param, seed=1)
    model, tokenizer = load_policy(path)
    return request.param, path, model, tokenizer


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)


def _ask(image: np.ndarray | str, text: str = "What is shown?") -> list[dict]:
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]


def test_a_vision_language_directory_loads_with_its_processor(vlm) -> None:
    family, _, model, tokenizer = vlm
    assert type(model).__name__.endswith("ForConditionalGeneration")
    processor, found = processor_of(tokenizer)
    assert found.name == family and processor.tokenizer is tokenizer and tokenizer.padding_side == "left"


def test_image_prompts_expand_image_tokens_and_keep_text_prompts_plain(vlm) -> None:
    _, _, model, tokenizer = vlm
    encoded = encode_prompt_batch(tokenizer, ["just text", _ask(_image(0)), _ask(_image(1))])
    image_token = model.config.image_token_id if hasattr(model.config, "image_token_id") else model.config.image_token_index
    counts = [ids.count(image_token) for ids in encoded.ids]
    assert counts[0] == 0 and counts[1] == counts[2] > 1
    assert encoded.images.num_owners == 3 and encoded.images.images_per_owner().tolist() == [0, 1, 1]


def test_an_image_prompt_for_a_text_model_names_the_fix(tiny_model_dir=None) -> None:
    from grove.models.tiny import create_tiny_model_dir

    path = create_tiny_model_dir(Path(__import__("tempfile").mkdtemp()) / "text")
    _, tokenizer = load_policy(path)
    with pytest.raises(ImagePromptError, match="prompt 0 holds an image, but the policy is a text-only model"):
        encode_prompt_batch(tokenizer, [_ask(_image(0))])


def test_bad_image_values_name_the_prompt(vlm, tmp_path) -> None:
    tokenizer = vlm[3]
    with pytest.raises(ImagePromptError, match=r"prompt 0: cannot read the image file"):
        encode_image_prompts(tokenizer, [_ask(str(tmp_path / "missing.png"))])
    with pytest.raises(ImagePromptError, match=r"an image array must be numeric"):
        encode_image_prompts(tokenizer, [_ask(np.zeros((2, 2, 2, 2)))])


def _rollout(vlm, prompts, n=3, seed=0, **sampling):
    _, _, model, tokenizer = vlm
    encoded = encode_prompt_batch(tokenizer, prompts)
    engine = TransformersEngine(model, tokenizer)
    out = engine.generate(encoded.ids, n, SamplingParams(max_new_tokens=5, **sampling),
                          torch.Generator().manual_seed(seed), images=encoded.images)
    return encoded, out


def _batch(out) -> RolloutBatch:
    m = out.num_samples
    mask = out.response_mask.bool()
    return RolloutBatch(
        prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask.bool(), response_ids=out.response_ids,
        response_mask=mask, loss_mask=mask, old_logprobs=out.logprobs, rewards=torch.zeros(m, 1),
        reward_names=("r",), group_index=out.prompt_index, trajectory_index=torch.arange(m),
        step_index=torch.zeros(m, dtype=torch.long), truncated=out.truncated, images=out.images,
    )


@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_rollout_logprobs_equal_the_training_forward_on_policy(vlm, layout) -> None:
    """Ratio 1: the sampler's log-probs are those the update recomputes with the pixels, in fp32, whatever
    ``train.forward`` says (image prompts run padded); a micro-batch carries its own samples' images."""
    _, out = _rollout(vlm, [_ask(_image(0)), "text only", _ask(_image(1), "Describe.")])
    batch = _batch(out)
    assert batch.images.num_owners == 9 and batch.images.images_per_owner().tolist() == [1] * 3 + [0] * 3 + [1] * 3
    model = vlm[2]
    with torch.no_grad():
        logp, _ = layout_logprobs(model, batch, layout)
        part, _ = layout_logprobs(model, batch.select([7, 1, 4]), layout)
    mask = batch.response_mask
    assert torch.allclose(logp[mask], batch.old_logprobs[mask], atol=2e-5)
    assert torch.allclose(part, logp[[7, 1, 4]], atol=2e-5)


def test_the_image_changes_the_samples_and_the_logprobs(vlm) -> None:
    """Same text, different pixels: the prefill and the training forward both read the image."""
    _, out_a = _rollout(vlm, [_ask(_image(0))], n=1, temperature=0.0)
    _, out_b = _rollout(vlm, [_ask(_image(5))], n=1, temperature=0.0)
    model = vlm[2]
    swapped = _batch(out_a).replace(images=_batch(out_b).images)
    with torch.no_grad():
        own, _ = layout_logprobs(model, _batch(out_a), "padded")
        other, _ = layout_logprobs(model, swapped, "padded")
    assert not torch.allclose(own, other, atol=1e-4)


def test_identical_text_with_other_images_is_not_merged(vlm) -> None:
    _, _, _, tokenizer = vlm
    encoded = encode_prompt_batch(tokenizer, [_ask(_image(0)), _ask(_image(1)), _ask(_image(0))])
    ids, mask = left_pad(encoded.ids, 0)
    distinct = DistinctPrompts.of(ids, mask, 2, encoded.images)
    assert len(distinct.ids) == 2 and distinct.merged
    assert distinct.fan_out.tolist()[0:2] == distinct.fan_out.tolist()[4:6]
    assert distinct.fan_out[0] != distinct.fan_out[2]
    rows = distinct.images_of(encoded.images)
    assert rows.num_owners == 2 and rows.num_images == 2


def test_concatenated_batches_keep_each_samples_images(vlm) -> None:
    _, out_a = _rollout(vlm, [_ask(_image(0))], n=2)
    _, out_b = _rollout(vlm, ["text"], n=1)
    a, b = _batch(out_a), _batch(out_b).replace(images=None)
    both = concat_batches([a, b, a])
    assert both.images.num_owners == 5 and both.images.images_per_owner().tolist() == [1, 1, 0, 1, 1]


def _data(tmp_path: Path, rows: int = 8) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    lines = []
    for i in range(rows):
        Image.fromarray(_image(i)).save(folder / f"img{i}.png")
        lines.append({"prompt": "What color?", "answer": "red", "image": f"img{i}.png"})
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder / "train.jsonl"


@pytest.mark.parametrize("family", FAMILIES)
def test_grpo_on_image_prompts_trains_checkpoints_and_resumes_exactly(family, tmp_path) -> None:
    """A run of image prompts (paths relative to the data file) trains with on-policy ratio 1, saves the processor
    with the model, and a resumed run equals the uninterrupted one."""
    from grove.api import train

    model = create_tiny_vision_model_dir(tmp_path / "model", family=family)
    data = _data(tmp_path)
    settings = {
        "model": {"name": str(model)}, "threads": 1,
        "task": {"id": "jsonl", "train_path": str(data), "image_column": "image", "eval_fraction": 0.25},
        "rewards": [{"id": "vision_rewards:e_share"}],
        "rollout": {"max_new_tokens": 6, "engine": "transformers"},
        "train": {"steps": 3, "prompts_per_step": 2, "completions_per_prompt": 3},
        "eval": {"every": 0}, "checkpoint": {"every": 1, "keep_last": 3}, "logging": {"progress": False},
    }
    full = train({**settings, "output_dir": str(tmp_path / "full")})
    rows = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["trained_tokens"] > 0 for r in rows)
    assert rows[0]["ratio"] == pytest.approx(1.0, abs=1e-5)
    saved = tmp_path / "full" / "checkpoints" / "step-000003" / "model"
    reloaded, tokenizer = load_policy(saved)
    assert processor_of(tokenizer) is not None and type(reloaded).__name__.endswith("ForConditionalGeneration")
    train({**settings, "output_dir": str(tmp_path / "cut"), "train": {**settings["train"], "steps": 2}})
    resumed = train({**settings, "output_dir": str(tmp_path / "cut")}, resume=True)
    a = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()][-1]
    b = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()][-1]
    assert a["loss"] == b["loss"] and a["reward_mean"] == b["reward_mean"]
    assert full is not None and resumed is not None


def test_qwen2_vl_is_refused_naming_why(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "vision_config": {}}))
    with pytest.raises(ModelLoadError, match="multimodal rotary positions"):
        load_policy(tmp_path)


@pytest.mark.parametrize("temperature", [0.0, 1.0, 0.7])
def test_tokens_never_sampled_are_cut_but_logprobs_stay_the_full_vocabularys(temperature) -> None:
    """The image placeholder is never drawn (greedy picks the next best) and the recorded log-prob of what is drawn is
    the untruncated policy's, so the update's recomputation over the whole vocabulary still gives ratio 1."""
    from grove.rollout.sampling import sample_tokens

    logits = torch.tensor([[5.0, 1.0, 0.5, 4.0], [0.0, 9.0, 0.0, 0.0]])
    never = torch.tensor([0, 1])
    for u in (0.01, 0.5, 0.99):
        tokens, logp = sample_tokens(logits, temperature, 0, 1.0, torch.full((2,), u, dtype=torch.float64), never)
        assert not set(tokens.tolist()) & {0, 1}
        scaled = logits / (temperature or 1.0)
        full = torch.log_softmax(scaled, dim=-1).gather(1, tokens[:, None]).squeeze(1)
        assert torch.allclose(logp, full)
    greedy, _ = sample_tokens(logits, 0.0, 0, 1.0, torch.zeros(2, dtype=torch.float64), never)
    assert greedy.tolist() == [3, 2]  # row 1: the best allowed token (a tie of 2 and 3: the first)


def test_a_missing_image_file_names_the_row(tmp_path) -> None:
    from grove.tasks.task import TaskDataError, build_task

    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "q", "answer": "a", "image": "nowhere.png"}) + "\n")
    with pytest.raises(TaskDataError, match=r"train.jsonl:1: image 'nowhere.png' of column 'image' does not exist"):
        build_task("jsonl", {"train_path": str(data), "image_column": "image", "eval_fraction": 0})


def test_image_column_values_become_image_parts_before_the_text(tmp_path) -> None:
    from grove.tasks.task import build_task

    folder = tmp_path / "d"
    folder.mkdir()
    Image.fromarray(_image(0)).save(folder / "a.png")
    rows = [{"prompt": "q0", "answer": "x", "image": ["a.png", "a.png"]}, {"prompt": "q1", "answer": "y"}]
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = build_task("jsonl", {"train_path": str(folder / "t.jsonl"), "image_column": "image",
                                "eval_path": str(folder / "t.jsonl")})
    first, second = task.train
    assert [p["type"] for p in first.prompt[0]["content"]] == ["image", "image", "text"]
    assert first.prompt[0]["content"][0]["image"] == str(folder / "a.png") and first.prompt_text == "q0"
    assert second.prompt == "q1"


@pytest.mark.parametrize("prompt", ["per_step", "conversation"])
def test_an_environment_whose_observations_hold_images_trains_on_policy(prompt, tmp_path) -> None:
    """Every turn's prompt carries its observation's picture (a conversation carries every picture so far), the
    samples keep them, and the update recomputes the rollout's log-probs (ratio 1) with GiGPO's step credit."""
    from grove.api import train

    model = create_tiny_vision_model_dir(tmp_path / "model", family="llava")
    run = tmp_path / "run"
    train({
        "model": {"name": str(model)}, "threads": 1, "output_dir": str(run),
        "env": {"id": "tests.agent_envs:corridor", "params": {"length": 2, "pictures": True}, "max_turns": 4,
                "prompt": prompt, "action_parser": {"id": "raw"}},
        "algorithm": {"advantage": {"id": "gigpo"}},
        "rollout": {"max_new_tokens": 4, "engine": "transformers"},
        "train": {"steps": 3, "prompts_per_step": 2, "completions_per_prompt": 2},
        "eval": {"every": 0}, "checkpoint": {"every": 0}, "logging": {"progress": False},
    })
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r["trained_tokens"] > 0]
    assert trained, "no step had a signal to train on"
    assert all(r["ratio"] == pytest.approx(1.0, abs=1e-5) for r in trained)
    assert all(r["logprob_mismatch_max"] < 1e-4 for r in rows)


def test_conversation_samples_carry_every_picture_of_their_tokens(vlm) -> None:
    from grove.envs.actions import ParsedAction
    from grove.envs.base import Observation
    from grove.experience.conversation import ConversationPrompter
    from grove.experience.episode_records import Turn

    _, _, model, tokenizer = vlm
    prompter = ConversationPrompter(tokenizer, "Play.", show_admissible=False, max_context_tokens=4096,
                                    max_new_tokens=4)
    first = Observation("start", anchor=0, images=(_image(0),))
    prompter.begin(first)
    rows = int(prompter.images.rows.sum())  # an image's rows (one for LLaVA, its crops for Idefics3)
    action = tokenizer("left", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    turn = Turn(observation=first, action_ids=action, logprobs=[0.0] * len(action), text="left",
                parsed=ParsedAction("left", True), reward=0.0, penalty=0.0, done=False, finish_reason="eos", info={})
    prompter.record(turn, Observation("next", anchor=1, images=(_image(1),)))
    [sample] = prompter.samples()
    assert int(sample.images.rows.sum()) == 2 * rows and prompter.images is sample.images
    image_token = getattr(model.config, "image_token_id", None) or model.config.image_token_index
    tokens = sample.prompt_ids + sample.response_ids
    assert sample.prompt_ids.count(image_token) > 0
    assert sample.prompt_ids.count(image_token) * 2 == tokens.count(image_token)  # the second picture's, expanded


@pytest.mark.parametrize("family", FAMILIES)
def test_sft_on_image_conversations_lowers_the_held_out_loss_and_encodes_prompts_as_rollouts_do(family, tmp_path) -> None:
    """Rows whose user messages hold images (paths relative to the data file) train; an example's prompt stretch
    equals the rollout's encoding of the same prompt, and its pixels travel with it."""
    from grove.api import train
    from grove.sft.data import load_sft_examples

    model_dir = create_tiny_vision_model_dir(tmp_path / "model", family=family)
    folder = tmp_path / "data"
    folder.mkdir()
    rows = []
    for i in range(12):
        Image.fromarray(_image(i % 3)).save(folder / f"img{i}.png")
        rows.append({"messages": [
            {"role": "user", "content": [{"type": "image", "image": f"img{i}.png"}, {"type": "text", "text": "Which?"}]},
            {"role": "assistant", "content": ["red", "green", "blue"][i % 3]},
        ]})
    (folder / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, tokenizer = load_policy(model_dir)
    [first, *_] = load_sft_examples(folder / "sft.jsonl", tokenizer, max_length=512)
    prompt = encode_prompt_batch(tokenizer, [_ask(str(folder / "img0.png"), "Which?")])
    assert first.input_ids[: len(prompt.ids[0])] == prompt.ids[0]
    assert torch.equal(first.images.row_tensors["pixel_values"], prompt.images.row_tensors["pixel_values"])
    run = tmp_path / "sft"
    train({
        "model": {"name": str(model_dir)}, "threads": 1, "output_dir": str(run),
        "sft": {"data": [str(folder / "sft.jsonl")], "eval_fraction": 0.25},
        "train": {"steps": 6, "micro_batch_size": 4}, "optim": {"lr": 3e-3},
        "checkpoint": {"every": 0}, "logging": {"progress": False},
    }, kind="sft")
    evals = [json.loads(x) for x in (run / "eval.jsonl").read_text().splitlines()]
    assert evals[-1]["held_out_loss"] < evals[0]["held_out_loss"]


def test_a_lora_policy_on_image_prompts_keeps_ratio_one_and_its_reference(tmp_path) -> None:
    """LoRA adapters on a vision-language model: the reference (adapters off) and the policy both read the pixels."""
    from grove.api import train

    model = create_tiny_vision_model_dir(tmp_path / "model", family="llava")
    run = tmp_path / "run"
    train({"model": {"name": str(model), "lora": {"r": 4}}, "threads": 1, "output_dir": str(run),
           "task": {"id": "jsonl", "train_path": str(_data(tmp_path)), "image_column": "image", "eval_fraction": 0.25},
           "rewards": [{"id": "vision_rewards:e_share"}], "rollout": {"max_new_tokens": 6},
           "algorithm": {"kl": {"coef": 0.05}},
           "train": {"steps": 2, "prompts_per_step": 2, "completions_per_prompt": 3},
           "eval": {"every": 0}, "checkpoint": {"every": 2}, "logging": {"progress": False}})
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-7) and rows[1]["kl"] > 0  # the adapters moved the policy
    assert all(r["ratio"] == pytest.approx(1.0, abs=1e-5) and r["trained_tokens"] > 0 for r in rows)
    # grove export merges the adapters into a plain vision-language model directory, processor included
    from grove.models.merged_export import export_merged

    merged = export_merged(run / "checkpoints" / "step-000002", tmp_path / "merged")
    model, tokenizer = load_policy(merged)
    assert processor_of(tokenizer) is not None and type(model).__name__ == "LlavaForConditionalGeneration"


def test_a_composed_model_reads_text_as_its_text_model_did_and_trains_on_pictures(tmp_path) -> None:
    """``grove compose-vlm``: the composed model's logits on a text prompt equal the text model's; an image prompt
    expands into one token per patch; its processor and template round-trip through load_policy."""
    from typer.testing import CliRunner

    from grove.cli import app
    from grove.models.tiny import create_tiny_model_dir

    text_dir = create_tiny_model_dir(tmp_path / "text", seed=3)
    out = tmp_path / "composed"
    done = CliRunner().invoke(app, ["compose-vlm", str(out), "--text", str(text_dir), "--image-size", "16",
                                    "--patch-size", "4", "--vision-hidden", "16", "--vision-heads", "2"])
    assert done.exit_code == 0, done.output
    text, text_tokenizer = load_policy(text_dir)
    model, tokenizer = load_policy(out)
    prompt = encode_prompt_batch(text_tokenizer, ["What is 2 + 3?"]).ids[0]
    assert encode_prompt_batch(tokenizer, ["What is 2 + 3?"]).ids[0] == prompt
    with torch.no_grad():
        expected = text(torch.tensor([prompt])).logits
        got = model(torch.tensor([prompt])).logits[..., : expected.shape[-1]]
    assert torch.equal(got, expected)
    encoded = encode_prompt_batch(tokenizer, [_ask(_image(0))])
    assert encoded.ids[0].count(model.config.image_token_index) == (16 // 4) ** 2
    again = CliRunner().invoke(app, ["compose-vlm", str(out), "--text", str(text_dir)])
    assert again.exit_code == 2 and "is not an empty directory" in again.output


def test_the_shapes_task_answers_what_its_pictures_show() -> None:
    from grove.tasks.task import build_task
    from grove.wings.shapes.shape_pictures import COLOURS

    task = build_task("shapes", {"questions": ["colour", "shape", "both", "count"], "train_size": 60, "eval_size": 10})
    kinds = {e.columns["question_kind"] for e in task.train}
    assert kinds == {"colour", "shape", "both", "count"}
    for example in task.train:
        pixels = example.prompt[0]["content"][0]["image"]
        if example.columns["question_kind"] == "colour":  # the colour at the centre of the only shape
            ys, xs = np.nonzero(np.abs(pixels.astype(int) - COLOURS[example.answer]).sum(-1) < 10)
            assert len(ys) > 0
    train_pixels = {e.prompt[0]["content"][0]["image"].tobytes() for e in task.train}
    assert not any(e.prompt[0]["content"][0]["image"].tobytes() in train_pixels for e in task.eval)


@pytest.mark.parametrize(("completion", "gold", "score"), [
    ("Red.", "red", 1.0), ("It is a red circle", "red circle", 1.0), ("the shape is blue", "blue", 1.0),
    ("red green blue yellow circle", "red", 0.0), ("circle", "red circle", 0.0), ("3", "3", 1.0), ("", "red", 0.0),
])
def test_picture_answer_reads_the_first_words(completion, gold, score) -> None:
    from grove.registry import REWARD_FUNCTIONS

    entry = REWARD_FUNCTIONS.entry("picture_answer")
    assert entry.fn(["q"], [completion], params=entry.params(), answer=[gold]) == [score]


def test_demos_of_an_image_task_write_messages_rows_and_pngs_that_sft_reads(tmp_path) -> None:
    """``grove demos`` on the shapes task: one ``messages`` row per example, its picture a PNG beside the file; the
    rows load as SFT examples whose prompt is the rollout's encoding of the same prompt."""
    from grove.config import GroveConfig
    from grove.demos.writer import write_demonstrations
    from grove.sft.data import load_sft_examples
    from grove.tasks.task import build_task

    model_dir = create_tiny_vision_model_dir(tmp_path / "model", family="llava", image_size=32)
    _, tokenizer = load_policy(model_dir)
    cfg = GroveConfig.model_validate({"model": {"name": str(model_dir)}, "task": {
        "id": "shapes", "train_size": 6, "eval_size": 2}, "rewards": [{"id": "picture_answer"}]})
    out = tmp_path / "demos.jsonl"
    summary = write_demonstrations(cfg, tokenizer, out, episodes=4)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 4 and summary.rows == 4
    picture = rows[0]["messages"][0]["content"][0]["image"]
    assert picture.startswith("demos_images/") and (tmp_path / picture).is_file()
    examples = load_sft_examples(out, tokenizer, max_length=512)
    task = build_task(cfg.task)
    index = rows[0]["task_id"]
    prompt = encode_prompt_batch(tokenizer, [task.train[index].prompt])
    assert examples[0].input_ids[: len(prompt.ids[0])] == prompt.ids[0]
    assert tokenizer.decode(examples[0].input_ids[len(prompt.ids[0]):]).startswith(task.train[index].answer)


def test_the_shapes_recipe_runs_end_to_end_on_a_tiny_composed_model(tmp_path, monkeypatch) -> None:
    """examples/shapes_vlm_sft.yaml and shapes_vlm_grpo.yaml, as their headers run them, on a model composed from a
    tiny text model: compose-vlm, demos, sft, then GRPO from the warm start with held-out evaluations."""
    from typer.testing import CliRunner

    from grove.cli import app
    from grove.models.tiny import create_tiny_model_dir

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    text = create_tiny_model_dir(tmp_path / "text")

    def ok(args):
        done = runner.invoke(app, args)
        assert done.exit_code == 0, done.output
        return done

    ok(["compose-vlm", "runs/shapes-vlm/base", "--text", str(text), "--vision-hidden", "16", "--vision-heads", "2"])
    small = ["--set", "task.train_size=40", "--set", "task.eval_size=6", "--set", "threads=1",
             "--set", "logging.progress=false"]
    sft = str(root / "examples/shapes_vlm_sft.yaml")
    ok(["demos", sft, "--episodes", "24", "--out", "runs/shapes-vlm-demos.jsonl", *small])
    ok(["sft", sft, *small, "--set", "sft.batch_size=8", "--set", "train.micro_batch_size=8",
        "--set", "eval.max_examples=6", "--set", "eval.samples=2"])
    assert (tmp_path / "runs/shapes-vlm-sft/model/processor_config.json").is_file()
    ok(["train", str(root / "examples/shapes_vlm_grpo.yaml"), *small, "--set", "train.steps=2",
        "--set", "train.prompts_per_step=2", "--set", "train.completions_per_prompt=3",
        "--set", "eval.every=2", "--set", "eval.max_examples=6", "--set", "eval.samples=2"])
    evals = [json.loads(x) for x in (tmp_path / "runs/shapes-vlm-grpo/eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2] and all("sampled/accuracy" in e for e in evals)
    shown = ok(["config", "show", str(root / "examples/shapes_vlm_grpo.yaml"), *small])  # its memory plan too
    assert "estimated peak memory (longest prompt" in shown.output


def test_the_image_route_of_knowledge_base_routing(tmp_path) -> None:
    """The emblems picture knowledge base: its captions never say what the emblem shows; an ``emblem_colour``
    question routes to it, a search shows the picture (Observation.images) and counts as a retrieval hit through
    what the picture shows; a vision-language policy trains on such episodes with ratio 1."""
    from grove.api import train
    from grove.knowledge import build_knowledge_base
    from grove.registry import ENVIRONMENTS

    kb = build_knowledge_base("emblems")
    house, passage = kb.facts()[7]
    colour = passage.image_facts.split()[1]
    assert colour not in passage.text.lower() and kb.search(f"the emblem of {house}", 3)[0] is passage
    env_params = {"knowledge_bases": {"pictures": {"id": "emblems"}},  # the questions are built on its defaults
                  "questions": {"categories": ["emblem_colour"], "per_category": 30, "min_category_size": 5,
                                "cache_dir": str(tmp_path / "cache")},
                  "quiz_eval": False}
    suite = ENVIRONMENTS.entry("kb_routing").fn(ENVIRONMENTS.entry("kb_routing").params.model_validate(env_params))
    env = suite.make()
    first = env.reset(suite.train_tasks[0], 0)
    assert first.text.startswith("Question: What colour is the shape on the emblem of House") and not first.images
    query = env.oracle_action()
    assert 'kb="pictures"' in query
    found = env.step(query)
    assert len(found.observation.images) >= 1 and found.info["hit"] and found.info["routing_correct"]
    assert found.info["route"] == "pictures" and env.step("<answer>red</answer>").info["route"] == "pictures"
    model = create_tiny_vision_model_dir(tmp_path / "model", family="llava", context_length=2048)
    run = tmp_path / "run"
    train({"model": {"name": str(model)}, "threads": 1, "output_dir": str(run),
           "env": {"id": "kb_routing", "params": env_params, "max_turns": 2, "prompt": "conversation"},
           "algorithm": {"advantage": {"id": "step_grpo"}}, "rollout": {"max_new_tokens": 6, "engine": "transformers"},
           "train": {"steps": 2, "prompts_per_step": 2, "completions_per_prompt": 2},
           "eval": {"every": 0}, "checkpoint": {"every": 0}, "logging": {"progress": False}})
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["logprob_mismatch_max"] < 1e-4 for r in rows)


def test_fsdp2_shards_the_text_decoders_layers_and_the_engine_says_once_that_image_prompts_skip_prefix_reuse(
    vlm, caplog
) -> None:
    from grove.distributed.strategies import decoder_layers

    _, _, model, _ = vlm
    assert decoder_layers(model) == list(model.get_decoder().layers)
    with caplog.at_level("INFO", logger="grove.rollout.hf_engine"):
        _rollout(vlm, [_ask(_image(0))], n=1)
    assert "prefilled whole (no prefix reuse" in caplog.text


def test_demos_of_an_environment_that_shows_pictures_save_their_pixels_for_sft(tmp_path) -> None:
    """``grove demos`` on the image route of knowledge-base routing: each conversation row names a pixel file beside
    the demonstration file; ``grove sft`` reads the pixels a rollout of the same episode holds and trains on them. A
    pixel file made by another image processor, or one that is missing, is refused naming the fix."""
    import yaml
    from typer.testing import CliRunner

    from grove.api import train
    from grove.cli import app
    from grove.config import GroveConfig
    from grove.demos.expert_episodes import EnvironmentDemonstrations
    from grove.demos.writer import write_demonstrations
    from grove.sft.data import SftDataError, load_sft_examples

    model_dir = create_tiny_vision_model_dir(tmp_path / "model", family="llava", context_length=2048)
    _, tokenizer = load_policy(model_dir)
    env_params = {"knowledge_bases": {"pictures": {"id": "emblems"}},
                  "questions": {"categories": ["emblem_colour"], "per_category": 30, "min_category_size": 5,
                                "cache_dir": str(tmp_path / "cache")},
                  "quiz_eval": False}
    config = {"model": {"name": str(model_dir)}, "threads": 1,
              "env": {"id": "kb_routing", "params": env_params, "max_turns": 2, "prompt": "conversation"},
              "rollout": {"max_new_tokens": 40}}
    out = tmp_path / "demos.jsonl"
    write_demonstrations(GroveConfig.model_validate(config), tokenizer, out, episodes=3)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    (tmp_path / "demos.yaml").write_text(yaml.safe_dump(config))  # the command line loads the processor too
    done = CliRunner().invoke(app, ["demos", str(tmp_path / "demos.yaml"), "--episodes", "3",
                                    "--out", str(tmp_path / "cli.jsonl")])
    assert done.exit_code == 0, done.output
    assert [json.loads(x)["pixels"] for x in (tmp_path / "cli.jsonl").read_text().splitlines()] == [
        r["pixels"].replace("demos_images", "cli_images") for r in rows]
    assert len(rows) == 3 and all(r["pixels"].startswith("demos_images/") for r in rows)
    assert all((tmp_path / r["pixels"]).is_file() for r in rows)
    examples = load_sft_examples(out, tokenizer, max_length=2048)
    demos = EnvironmentDemonstrations(GroveConfig.model_validate(config), tokenizer)
    task_id, seed = demos.starts(3, 0)[0]
    [played] = demos.play(task_id, seed).samples
    assert examples[0].input_ids == [*played.prompt_ids, *played.response_ids]
    assert torch.equal(examples[0].images.row_tensors["pixel_values"], played.images.row_tensors["pixel_values"])
    assert examples[0].images.num_images >= 1 and all(ex.images is not None for ex in examples)

    run = tmp_path / "sft"
    train({**config, "output_dir": str(run), "sft": {"data": [str(out)], "eval_fraction": 0.0},
           "train": {"micro_batch_size": 2}, "checkpoint": {"every": 0}, "logging": {"progress": False}},
          kind="sft")
    trained = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert trained and all(math.isfinite(r["loss"]) and r["trained_tokens"] > 0 for r in trained)

    other = create_tiny_vision_model_dir(tmp_path / "other", family="llava", context_length=2048, image_size=48)
    _, other_tokenizer = load_policy(other)
    with pytest.raises(SftDataError, match="another image processor.*regenerate the demonstrations"):
        load_sft_examples(out, other_tokenizer, max_length=2048)
    (tmp_path / rows[1]["pixels"]).unlink()
    with pytest.raises(SftDataError, match=r"demos\.jsonl:2: the pixel file .* is missing"):
        load_sft_examples(out, tokenizer, max_length=2048)
