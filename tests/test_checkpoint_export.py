"""``grove export`` of a damaged checkpoint: refused before anything is written, naming the damaged file and the
previous intact checkpoint; a damaged trainer state does not stop an export of intact weights."""

from __future__ import annotations

import pytest
from tests.tiny_runs import full_and_lora_runs, same_weights, weights
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from grove.cli import app
from grove.infra import checkpoint as ckpt
from grove.models.merged_export import export_merged
from grove.models.model_files import ModelFilesError
from grove.training.checkpoint_export import DamagedCheckpointError, export_checkpoint


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 2-step full fine-tuning run and a 2-step LoRA run, a checkpoint after each step."""
    return full_and_lora_runs(tmp_path_factory.mktemp("export"))[1:]


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _flip_middle(path):
    data = bytearray(path.read_bytes())
    data[len(data) - 100] ^= 0xFF  # inside the tensor data: the file still loads
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_a_flipped_byte_in_the_weights_is_refused(runs, tmp_path, kind):
    run = _copy(runs[kind == "lora"], tmp_path / "run")
    step2 = ckpt.checkpoint_dir(run, 2)
    weights_file = next((step2 / "model").glob("*.safetensors"))
    _flip_middle(weights_file)
    export_merged(step2, tmp_path / "unchecked")  # the weights still load: only the manifest can tell
    out = tmp_path / "out"
    out.mkdir()  # an empty directory given as OUT stays as it is
    with pytest.raises(DamagedCheckpointError) as info:
        export_checkpoint(step2, out)
    message = str(info.value)
    assert f"model/{weights_file.name} does not match its checksum" in message
    assert f"grove export {ckpt.checkpoint_dir(run, 1)} {out}" in message and "nothing was written" in message
    assert list(out.iterdir()) == [] and [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []
    with pytest.raises(DamagedCheckpointError):  # its model/ directory given directly: the same check
        export_checkpoint(step2 / "model", out)
    assert export_checkpoint(ckpt.checkpoint_dir(run, 1), out) == out  # the previous one exports


def test_grove_export_refuses_a_flipped_byte_in_the_weights(runs, tmp_path):
    run = _copy(runs[0], tmp_path / "run")
    step2 = ckpt.checkpoint_dir(run, 2)
    _flip_middle(step2 / "model" / "model.safetensors")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["export", str(step2), str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert text.startswith("error:") and "does not match its checksum" in text and "Traceback" not in text
    assert not out.exists()


def test_truncated_weights_are_an_error_not_a_traceback(runs, tmp_path):
    run = _copy(runs[0], tmp_path / "run")
    step2 = ckpt.checkpoint_dir(run, 2)
    weights_file = step2 / "model" / "model.safetensors"
    weights_file.write_bytes(weights_file.read_bytes()[:1000])
    with pytest.raises(ModelFilesError, match="model.safetensors|does not load"):
        export_merged(step2, tmp_path / "direct")
    result = CliRunner().invoke(app, ["export", str(step2), str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in result.output, result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "direct").exists()
    with pytest.raises(DamagedCheckpointError, match="model/model.safetensors"):
        export_checkpoint(step2, tmp_path / "out")


def test_a_damaged_trainer_state_does_not_stop_an_export_of_intact_weights(runs, tmp_path):
    run = _copy(runs[0], tmp_path / "run")
    step2 = ckpt.checkpoint_dir(run, 2)
    (step2 / "trainer_state.pt").write_bytes(b"")
    out = export_checkpoint(step2, tmp_path / "out")
    exported = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    state = {k: v for k, v in exported.state_dict().items() if not k.endswith("lm_head.weight")}
    assert same_weights(state, weights(run, 2))


def test_no_intact_earlier_checkpoint_is_said_so(runs, tmp_path):
    run = _copy(runs[0], tmp_path / "run")
    for step in (1, 2):
        (ckpt.checkpoint_dir(run, step) / "model" / "config.json").write_text("{")
    with pytest.raises(DamagedCheckpointError, match="no earlier checkpoint of this run is intact"):
        export_checkpoint(ckpt.checkpoint_dir(run, 2), tmp_path / "out")
