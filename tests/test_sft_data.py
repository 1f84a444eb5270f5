"""SFT data: files → token ids with assistant-only loss masks (token parity with rollouts), length limits, the
held-out split, and batches whose packed forward equals the unpacked one."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from grove.batch import RolloutBatch
from grove.models.logprob_module import response_logprobs
from grove.models.shared_prefix_forward import shares_prefixes
from grove.models.tiny import CHATML_TEMPLATE, build_tiny_tokenizer
from grove.rollout.engine import encode_prompts
from grove.sft.batches import pack_groups, sft_batch
from grove.sft.data import SftDataError, SftExample, load_sft_examples, split_held_out
from grove.sft.demonstration_format import tokenizer_fingerprint

SYSTEM = "You are a helpful assistant."


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def enc(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def at(path: Path, line: int) -> str:
    """A regex matching the origin ``path:line``."""
    return re.escape(f"{path}:{line}")


def load(path, tok, **kw):
    kw.setdefault("max_length", 512)
    return load_sft_examples(path, tok, **kw)


def pieces(tok, *parts: tuple[str, int]) -> tuple[list[int], list[int]]:
    """Expected (ids, mask) from hand-written pieces: (text, trained) each tokenised on its own; "<eos>" is the
    eos id."""
    ids: list[int] = []
    mask: list[int] = []
    for text, trained in parts:
        piece = [tok.eos_token_id] if text == "<eos>" else enc(tok, text)
        ids += piece
        mask += [trained] * len(piece)
    return ids, mask


# ---------------------------------------------------------------------------------------------- row formats
def test_messages_train_on_assistant_turns_only(tok, tmp_path) -> None:
    conversation = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 12 + 7?"},
        {"role": "assistant", "content": "19"},
        {"role": "tool", "content": "checked: 19"},
        {"role": "user", "content": "Then divide by two."},
        {"role": "assistant", "content": "Let me think. 9.5"},
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": conversation}])
    [example] = load(path, tok, system_prompt=SYSTEM)  # the row's own system message wins
    ids, mask = pieces(
        tok,
        ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 12 + 7?<|im_end|>\n"
         "<|im_start|>assistant\n", 0),
        ("19", 1), ("<eos>", 1),
        ("\n<|im_start|>tool\nchecked: 19<|im_end|>\n<|im_start|>user\nThen divide by two.<|im_end|>\n"
         "<|im_start|>assistant\n", 0),
        ("Let me think. 9.5", 1), ("<eos>", 1),
    )
    assert example.input_ids == ids
    assert example.loss_mask == mask
    assert example.origin == f"{path}:1"
    assert tok.eos_token_id == 2 and example.input_ids[-1] == 2


@pytest.mark.parametrize("system_prompt", [None, SYSTEM])
def test_prompt_completion_strings_match_rollout_prompt_ids(tok, tmp_path, system_prompt) -> None:
    rows = [
        {"prompt": "What is 12 + 7?", "completion": "The answer is 19."},
        {"prompt": "Solve for x: 2x + 3 = 11", "completion": " x = 4. \\boxed{4}"},
    ]
    path = tmp_path / "pc.json"
    path.write_text(json.dumps(rows, indent=2))  # a JSON array: origins are index + 1
    examples = load(path, tok, system_prompt=system_prompt)
    for k, (row, example) in enumerate(zip(rows, examples, strict=True)):
        [prompt_ids] = encode_prompts(tok, [row["prompt"]], system_prompt=system_prompt, use_chat_template=True)
        completion = enc(tok, row["completion"])
        assert example.input_ids == [*prompt_ids, *completion, tok.eos_token_id]
        assert example.loss_mask == [0] * len(prompt_ids) + [1] * (len(completion) + 1)
        assert example.origin == f"{path}:{k + 1}"


def test_prompt_completion_without_chat_template_is_plain_text(tok, tmp_path) -> None:
    path = write_jsonl(tmp_path / "plain.jsonl", [{"prompt": "Question: how many apples?", "completion": " 3"}])
    [example] = load(path, tok, system_prompt="Answer:", use_chat_template=False)
    prompt_ids = enc(tok, "Answer:\nQuestion: how many apples?")  # the tiny tokenizer adds no special tokens
    assert prompt_ids == encode_prompts(tok, ["Question: how many apples?"], system_prompt="Answer:",
                                        use_chat_template=False)[0]
    assert example.input_ids == [*prompt_ids, *enc(tok, " 3"), 2]
    assert example.loss_mask == [0] * len(prompt_ids) + [1] * (len(enc(tok, " 3")) + 1)
    # the completion is tokenised on its own, as sampled: the text at once would merge "1" + "9" into "19"
    split = write_jsonl(tmp_path / "split.jsonl", [{"prompt": "The answer is 1", "completion": "9."}])
    [example] = load(split, tok, use_chat_template=False)
    assert example.input_ids == [*enc(tok, "The answer is 1"), *enc(tok, "9."), 2]
    assert example.input_ids[:-1] != enc(tok, "The answer is 19.")


def test_conversational_prompt_completion_from_parquet(tok, tmp_path) -> None:
    rows = [
        {
            "prompt": [
                {"role": "user", "content": "Count: 1 2 3"},
                {"role": "assistant", "content": "4 5"},  # context: not trained
                {"role": "user", "content": "More"},
            ],
            "completion": [{"role": "assistant", "content": "6 7 8"}],
        },
        {"prompt": [{"role": "user", "content": "Hi"}], "completion": [{"role": "assistant", "content": "Hello"}]},
    ]
    path = tmp_path / "conv.parquet"
    pd.DataFrame(rows).to_parquet(path)
    first, second = load(path, tok, system_prompt=SYSTEM)
    ids, mask = pieces(
        tok,
        (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nCount: 1 2 3<|im_end|>\n"
         "<|im_start|>assistant\n4 5<|im_end|>\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n", 0),
        ("6 7 8", 1), ("<eos>", 1),
    )
    assert (first.input_ids, first.loss_mask) == (ids, mask)
    [prompt_ids] = encode_prompts(tok, [rows[1]["prompt"]], system_prompt=SYSTEM)
    assert second.input_ids == [*prompt_ids, *enc(tok, "Hello"), 2]
    assert (first.origin, second.origin) == (f"{path}:1", f"{path}:2")


def test_json_lines_origins_count_blank_lines(tok, tmp_path) -> None:
    path = tmp_path / "lines.json"  # a .json file of JSON lines
    row = {"prompt": "Hi", "completion": "Hello"}
    path.write_text(json.dumps(row) + "\n\n" + json.dumps(row) + "\n")
    assert [e.origin for e in load(path, tok)] == [f"{path}:1", f"{path}:3"]


def test_demonstration_rows_are_taken_as_they_are(tok, tmp_path) -> None:
    fingerprint = tokenizer_fingerprint(tok)
    rows = [
        {"prompt_ids": [1, 50, 51], "completion_ids": [60, 2, 201, 70, 2], "completion_mask": [1, 1, 0, 1, 1],
         "tokenizer": fingerprint, "source": "frozenlake", "extra": 3},
        {"prompt_ids": [1, 52], "completion_ids": [61, 2], "completion_mask": [1, 1], "tokenizer": fingerprint,
         "turns": [0], "won": True},  # keys the first row lacks (and datasets fills with null there)
    ]
    path = write_jsonl(tmp_path / "demos.jsonl", rows)
    first, second = load(path, tok)
    assert first.input_ids == [1, 50, 51, 60, 2, 201, 70, 2]
    assert first.loss_mask == [0, 0, 0, 1, 1, 0, 1, 1]
    assert (second.input_ids, second.loss_mask) == ([1, 52, 61, 2], [0, 0, 1, 1])
    other = write_jsonl(tmp_path / "other.jsonl", [{**rows[0], "tokenizer": "0123456789abcdef"}])
    with pytest.raises(SftDataError, match=rf"^{at(other, 1)}: .*made with another tokenizer.*regenerate it with grove demos"):
        load(other, tok)
    broken = write_jsonl(tmp_path / "broken.jsonl", [rows[0], {**rows[0], "completion_mask": [1, 1]}])
    with pytest.raises(SftDataError, match=rf"^{at(broken, 2)}: not a valid demonstration row .*completion_mask"):
        load(broken, tok)


def test_auto_format_is_per_file_and_forced_format_applies_to_every_row(tok, tmp_path) -> None:
    chat = write_jsonl(tmp_path / "a.jsonl", [{"messages": [{"role": "user", "content": "Hi"},
                                                            {"role": "assistant", "content": "Hello"}]}])
    pc = write_jsonl(tmp_path / "b.jsonl", [{"prompt": "Hi", "completion": "Hello"}])
    a, b = load([chat, pc], tok)
    assert (a.input_ids, a.loss_mask) == (b.input_ids, b.loss_mask)
    assert (a.origin, b.origin) == (f"{chat}:1", f"{pc}:1")
    with pytest.raises(SftDataError, match=rf"^{at(pc, 1)}: the row has no 'messages'"):
        load([chat, pc], tok, data_format="messages")


def test_datasets_fills_missing_message_keys_which_are_ignored(tok, tmp_path) -> None:
    rows = [
        {"messages": [{"role": "user", "content": "Hi", "name": "ann"}, {"role": "assistant", "content": "Hello"}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
    ]
    a, b = load(write_jsonl(tmp_path / "keys.jsonl", rows), tok)
    assert a.input_ids == b.input_ids


# ---------------------------------------------------------------------------------------------- errors
MESSAGES = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


@pytest.mark.parametrize(
    ("bad_row", "message"),
    [
        ({"prompt": "Hi"}, r"the row has no 'completion' .*give it 'completion', a string or a list of messages"),
        ({"completion": "Hi"}, r"the row has no 'prompt'"),
        ({"messages": "Hi"}, r"messages must be a non-empty list .*got a string"),
        ({"messages": []}, r"messages must be a non-empty list"),
        ({"messages": [MESSAGES[0], "Hello"]}, r"messages\[1\] must be an object"),
        ({"messages": [{"role": "user", "content": 5}, MESSAGES[1]]},
         r"messages\[0\] \(user\) content must be a string, got a number"),
        ({"messages": [{"role": "robot", "content": "Hi"}, MESSAGES[1]]},
         r"messages\[0\] has role 'robot': the roles are system, user, assistant, tool"),
        ({"messages": [{"content": "Hi"}, MESSAGES[1]]}, r"messages\[0\] has role None"),
        ({"messages": [MESSAGES[0]]}, r"the conversation has no assistant message: add the assistant's answer"),
        ({"messages": [MESSAGES[0], {"role": "assistant", "content": " "}]},
         r"messages\[1\] is an empty assistant message: give it text"),
        ({"prompt": "Hi", "completion": ""}, r"the completion is empty: give it the text to train on"),
        ({"prompt": "Hi", "completion": MESSAGES[1:]},
         r"prompt is a string and completion a list: give both as strings, or both as lists of messages"),
        ({"prompt": MESSAGES[:1], "completion": [{"role": "tool", "content": "x"}]},
         r"the completion has no assistant message"),
    ],
)
def test_bad_rows_name_file_line_and_fix(tok, tmp_path, bad_row, message) -> None:
    good = {"messages": MESSAGES} if "messages" in bad_row else {"prompt": "Hi", "completion": "Hello"}
    path = write_jsonl(tmp_path / "data.jsonl", [good, good, bad_row])
    with pytest.raises(SftDataError, match=rf"^{at(path, 3)}: {message}"):
        load(path, tok)


def test_a_first_row_of_no_known_format_is_named(tok, tmp_path) -> None:
    path = write_jsonl(tmp_path / "text.jsonl", [{"text": "Hi", "label": None}])
    with pytest.raises(SftDataError, match=rf"^{at(path, 1)}: cannot tell the row format from the keys \['text'\]"
                                           ".*set sft.format"):
        load(path, tok)


def test_types_that_change_between_rows_are_read_line_by_line(tok, tmp_path) -> None:
    path = write_jsonl(tmp_path / "mixed.jsonl", [{"prompt": "Hi", "completion": "Hello"}, {"prompt": "Hi", "completion": 5}])
    with pytest.raises(SftDataError, match=rf"^{at(path, 2)}: prompt is a string and completion a number"):
        load(path, tok)


def test_file_errors_name_the_path_and_accepted_formats(tok, tmp_path) -> None:
    with pytest.raises(SftDataError, match=r"missing.jsonl does not exist \(accepted: .jsonl, .json, .parquet"):
        load(tmp_path / "missing.jsonl", tok)
    with pytest.raises(SftDataError, match=r"is a directory: name the data files in it \(accepted: .jsonl"):
        load(tmp_path, tok)
    (tmp_path / "data.csv").write_text("prompt,completion\nHi,Hello\n")
    with pytest.raises(SftDataError, match=r"data.csv: unknown data file ending '.csv'; accepted: .jsonl, .json, .parquet"):
        load(tmp_path / "data.csv", tok)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(SftDataError, match=r"empty.jsonl: the file holds no rows"):
        load(tmp_path / "empty.jsonl", tok)
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(SftDataError, match=r"empty.json: the file holds no rows"):
        load(tmp_path / "empty.json", tok)
    with pytest.raises(SftDataError, match=r"no data files given"):
        load([], tok)


def test_malformed_json_names_the_line(tok, tmp_path) -> None:
    good = json.dumps({"prompt": "Hi", "completion": "Hello"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(f"{good}\n\n{good}\n{{\"prompt\": \"Hi\", oops}}\n{good}\n")
    with pytest.raises(SftDataError, match=rf"^{at(bad, 4)}: not valid JSON .*fix the line"):
        load(bad, tok)
    listed = tmp_path / "list.jsonl"
    listed.write_text(f"{good}\n[1, 2]\n")
    with pytest.raises(SftDataError, match=rf"^{at(listed, 2)}: the line holds a list, not a JSON object"):
        load(listed, tok)
    listed.write_text(f"[1, 2]\n{good}\n")
    with pytest.raises(SftDataError, match=rf"^{at(listed, 1)}: the line holds a list, not a JSON object"):
        load(listed, tok)
    elements = tmp_path / "elements.json"
    elements.write_text(f"[{good}, 3]")
    with pytest.raises(SftDataError, match=rf"^{at(elements, 2)}: array element 2 is a number, not an object"):
        load(elements, tok)
    array = tmp_path / "array.json"
    array.write_text(f"[\n{good},\n{good}\n{good}\n]")  # a missing comma on line 3
    with pytest.raises(SftDataError, match=rf"^{at(array, 4)}: not valid JSON"):
        load(array, tok)


def _tokenizer_with(template: str):
    tok = build_tiny_tokenizer()
    tok.chat_template = template
    return tok


def test_templates_that_rewrite_history_or_skip_the_eos_are_refused(tmp_path) -> None:
    conversation = [*MESSAGES, {"role": "user", "content": "More"}, {"role": "assistant", "content": "Bye"}]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": conversation}])
    hides_past_answers = CHATML_TEMPLATE.replace(
        "message['content']", "('...' if message['role'] == 'assistant' and not loop.last else message['content'])"
    )
    with pytest.raises(SftDataError, match=rf"^{at(path, 1)}: the chat template renders the messages before messages\[3\] "
                                           "differently .*split the conversation"):
        load(path, _tokenizer_with(hides_past_answers))
    no_eos = CHATML_TEMPLATE.replace("'<|im_end|>' + '\\n'", "'\\n\\n'")
    with pytest.raises(SftDataError, match=rf"^{at(path, 1)}: the chat template does not end an assistant message with the "
                                           r"eos token '<\|im_end\|>'"):
        load(path, _tokenizer_with(no_eos))
    # one assistant turn needs no such check: it is the rollout's prompt and completion
    single = write_jsonl(tmp_path / "single.jsonl", [{"messages": MESSAGES}])
    assert load(single, _tokenizer_with(no_eos))[0].input_ids[-1] == 2


def test_chat_rows_need_the_chat_template(tok, tmp_path) -> None:
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": MESSAGES}])
    with pytest.raises(SftDataError, match=rf"^{at(path, 1)}: chat messages need the chat template"):
        load(path, tok, use_chat_template=False)


# ---------------------------------------------------------------------------------------------- length limits
def _length_rows(tok, tmp_path):
    rows = [
        {"prompt": "Hi", "completion": "Hello"},  # short
        {"prompt": "Hi", "completion": "The quick brown fox jumps over the lazy dog."},  # long, completion cut
        {"prompt": "Let me think step by step. " * 4, "completion": "ok"},  # long prompt: nothing trained left
    ]
    path = write_jsonl(tmp_path / "len.jsonl", rows)
    lengths = [len(e.input_ids) for e in load(path, tok)]
    return path, lengths


def test_overflow_error_names_length_and_options(tok, tmp_path) -> None:
    path, lengths = _length_rows(tok, tmp_path)
    limit = lengths[0] + 2
    assert lengths[1] > limit and lengths[2] > limit
    with pytest.raises(SftDataError, match=rf"^{at(path, 2)}: the example is {lengths[1]} tokens long, more than "
                                           rf"sft.max_length={limit}: raise sft.max_length, or set sft.overflow"):
        load(path, tok, max_length=limit)


def test_overflow_truncate_and_drop(tok, tmp_path, caplog) -> None:
    path, lengths = _length_rows(tok, tmp_path)
    full = load(path, tok)
    prompt_len = full[1].loss_mask.index(1)
    limit = lengths[0]  # row 1 fits; row 2 keeps limit - prompt_len trained tokens; row 3's prompt alone is longer
    kept_trained = limit - prompt_len
    assert full[0].loss_mask.index(1) == prompt_len and full[2].loss_mask.index(1) >= limit and kept_trained >= 2
    with caplog.at_level(logging.WARNING, logger="grove.sft.data"):
        cut = load(path, tok, max_length=limit, overflow="truncate")
    assert [e.origin for e in cut] == [f"{path}:1", f"{path}:2"]
    assert cut[1].input_ids == full[1].input_ids[:limit] and cut[1].loss_mask == [0] * prompt_len + [1] * kept_trained
    assert len(caplog.records) == 1 and "2 of 3 rows were longer; 1 cut to their first" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="grove.sft.data"):
        kept = load(path, tok, max_length=limit, overflow="drop")
    assert [e.input_ids for e in kept] == [full[0].input_ids]
    assert len(caplog.records) == 1 and "0 cut to their first" in caplog.text and "2 left out" in caplog.text
    with pytest.raises(SftDataError, match=r"every row is longer than sft.max_length=3"):
        load(path, tok, max_length=3, overflow="drop")


def test_option_values_are_checked(tok, tmp_path) -> None:
    path = write_jsonl(tmp_path / "x.jsonl", [{"prompt": "Hi", "completion": "Hello"}])
    with pytest.raises(SftDataError, match=r"sft.overflow 'cut' is unknown"):
        load(path, tok, overflow="cut")
    with pytest.raises(SftDataError, match=r"sft.format 'chat' is unknown"):
        load(path, tok, data_format="chat")


# ---------------------------------------------------------------------------------------------- held-out split
def test_split_held_out_is_seeded_disjoint_and_keeps_order() -> None:
    examples = [SftExample([1, 5 + i], [0, 1], f"f:{i + 1}") for i in range(20)]
    train, held = split_held_out(examples, 0.25, seed=3)
    assert len(held) == 5 and len(train) == 15
    assert {e.origin for e in train} | {e.origin for e in held} == {e.origin for e in examples}
    assert not {e.origin for e in train} & {e.origin for e in held}
    assert train == sorted(train, key=examples.index) and held == sorted(held, key=examples.index)
    assert split_held_out(examples, 0.25, seed=3) == (train, held)
    assert split_held_out(examples, 0.25, seed=4)[1] != held
    assert split_held_out(examples, 0.0, seed=3) == (examples, [])
    assert len(split_held_out(examples[:3], 0.01, seed=0)[1]) == 1  # at least one held out
    assert [len(part) for part in split_held_out(examples[:2], 0.9, seed=0)] == [1, 1]  # at least one to train on
    with pytest.raises(SftDataError, match="leaves none to train on"):
        split_held_out(examples[:1], 0.5, seed=0)


# ---------------------------------------------------------------------------------------------- batches
def test_pack_groups_first_fit_decreasing() -> None:
    # decreasing: 7 (bin a), 5 (b), 4 (c: 7+4 > 10, 5+4 ok -> b), 3 (a), 2 (c), 1 (c)... hand-traced:
    # sorted 7@1, 5@3, 4@0, 3@2, 2@4, 1@5 -> bins: 7->A, 5->B, 4->B (9), 3->A (10), 2->C, 1->B (10)
    assert pack_groups([4, 7, 3, 5, 2, 1], 10) == [0, 1, 1, 0, 2, 0]
    assert pack_groups([4, 7, 3], None) == [0, 1, 2]
    assert pack_groups([12, 3, 3], 10) == [0, 1, 1]  # too long for any bin: a bin of its own
    with pytest.raises(ValueError):
        pack_groups([1], 0)


def test_sft_batch_layout() -> None:
    examples = [
        SftExample([1, 10, 11, 12, 2], [0, 0, 1, 1, 1], "a:1"),
        SftExample([1, 20, 2], [0, 1, 1], "a:2"),
        SftExample([7, 30, 31, 2], [0, 0, 1, 1], "a:3"),
    ]
    batch = sft_batch(examples, pad_token_id=0)
    assert isinstance(batch, RolloutBatch)
    assert batch.prompt_ids.tolist() == [[1], [1], [7]] and batch.prompt_mask.all()
    assert batch.response_ids.tolist() == [[10, 11, 12, 2], [20, 2, 0, 0], [30, 31, 2, 0]]
    assert batch.response_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]]
    assert batch.loss_mask.int().tolist() == [[0, 1, 1, 1], [1, 1, 0, 0], [0, 1, 1, 0]]
    assert batch.advantages.tolist() == batch.response_mask.float().tolist()
    assert (batch.old_logprobs == 0).all() and batch.rewards.shape == (3, 0) and batch.reward_names == ()
    assert batch.group_index.tolist() == [0, 1, 2] and batch.trajectory_index.tolist() == [0, 1, 2]
    assert not batch.truncated.any() and (batch.step_index == 0).all()
    assert [m["origin"] for m in batch.metadata] == ["a:1", "a:2", "a:3"]
    # packed: only examples with the same first token share a group; 4 + 2 response tokens + 1 shared <= 7
    assert sft_batch(examples, 0, pack_length=7).group_index.tolist() == [0, 0, 1]
    assert sft_batch(examples, 0, pack_length=6).group_index.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="untrained first token"):
        sft_batch([SftExample([1, 2], [1, 1], "b:1")], 0)


def test_packed_log_probs_equal_unpacked_and_a_plain_forward(policy, tmp_path) -> None:
    model, tok = policy
    rows = [
        {"prompt": "What is 12 + 7?", "completion": "The answer is 19."},
        {"prompt": "Hi", "completion": "Hello"},
        {"messages": [{"role": "user", "content": "Count: 1 2 3"}, {"role": "assistant", "content": "4 5"},
                      {"role": "user", "content": "More"}, {"role": "assistant", "content": "6 7 8 9 10"}]},
        {"prompt": "Solve for x: 2x + 3 = 11", "completion": "x = 4"},
    ]
    examples = [
        *load(write_jsonl(tmp_path / "pc.jsonl", [r for r in rows if "prompt" in r]), tok, system_prompt=SYSTEM),
        *load(write_jsonl(tmp_path / "chat.jsonl", [r for r in rows if "messages" in r]), tok),
    ]
    longest = max(len(e.input_ids) for e in examples)
    packed = sft_batch(examples, tok.pad_token_id, pack_length=2 * longest)
    # some examples really share a packed row, which the packed forward sees as one shared prompt
    assert packed.group_index.unique().numel() < len(examples)
    assert shares_prefixes(packed.prompt_ids, packed.prompt_mask, packed.group_index)
    plain = sft_batch(examples, tok.pad_token_id)
    with torch.no_grad():
        logp_packed, _ = response_logprobs(model, packed, "packed")
        logp_padded, _ = response_logprobs(model, plain, "padded")
        assert (logp_packed - logp_padded).abs().max().item() <= 1e-5
        trained = (logp_packed * packed.loss_mask).sum(1)
        for k, example in enumerate(examples):
            ids = torch.tensor([example.input_ids])
            logp = torch.log_softmax(model(ids).logits.float()[0, :-1], -1)
            token_logp = logp.gather(-1, ids[0, 1:, None]).squeeze(-1)
            expected = (token_logp * torch.tensor(example.loss_mask[1:])).sum()
            assert abs(trained[k].item() - expected.item()) <= 1e-4
