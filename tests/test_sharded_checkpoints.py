"""``checkpoint.format: sharded`` (torch.distributed.checkpoint files, one per rank) on 2 gloo ranks (CPU, tiny
model, the scripted rollout engine of ``tests/distributed_worker.py``): a 2-rank FSDP2 run's sharded checkpoint
resumed as FSDP2, as DDP and by one process reaches the weights and metrics of the
uninterrupted one-process run, a one-process sharded checkpoint resumes on 2 FSDP2 ranks, each rank writes its
own shard file, a damaged shard is passed over by ``--resume``, a failed shard write leaves the previous checkpoint
and removes its temporary directory, and ``grove export`` and ``model.init_from`` refuse a sharded checkpoint
naming the way on."""

from __future__ import annotations

import shutil

import pytest
import torch

from grove.infra import checkpoint as ckpt
from grove.models.tiny import create_tiny_model_dir
from grove.training.checkpoint_export import export_checkpoint
from test_distributed_equivalence import ALGORITHMS, _base, _launch, _metrics

# the tests share one module's runs: on one xdist worker they are computed once (make test)
pytestmark = pytest.mark.xdist_group("sharded_checkpoints")


def _case(model, out, steps, strategy="ddp", resume=False, fmt="sharded") -> dict:
    overrides = _base(model, out, steps, strategy) + ALGORITHMS["grpo"] + [f"checkpoint.format={fmt}"]
    return {"overrides": overrides, "resume": resume}


def _copy_run(run, to):
    shutil.copytree(run, to)
    return to


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    model = create_tiny_model_dir(root / "tiny")
    _launch(1, [_case(model, root / "one-3", 3, fmt="full"), _case(model, root / "one-first", 2)], root / "a.json")
    _launch(2, [_case(model, root / "fsdp2-first", 2, "fsdp2")], root / "b.json")
    for name in ("as-fsdp2", "as-ddp", "as-one"):
        _copy_run(root / "fsdp2-first", root / name)
    _copy_run(root / "one-first", root / "one-as-fsdp2")
    _launch(2, [_case(model, root / "as-fsdp2", 3, "fsdp2", resume=True),
                _case(model, root / "as-ddp", 3, "ddp", resume=True),
                _case(model, root / "one-as-fsdp2", 3, "fsdp2", resume=True)], root / "c.json")
    _launch(1, [_case(model, root / "as-one", 3, resume=True, fmt="full")], root / "d.json")
    return root


def _sharded_weights(checkpoint) -> dict[str, torch.Tensor]:
    """The model weights of a sharded checkpoint, read by one process."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = checkpoint.parent / f"{checkpoint.name}.pt"
    dcp_to_torch_save(checkpoint / ckpt.SHARDED_DIR, out)
    model = torch.load(out, weights_only=False)["model"]
    return {k.removeprefix("causal_lm."): v for k, v in model.items()}


def _full_weights(checkpoint) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(checkpoint / "model" / "model.safetensors")


def _assert_same(run, reference, weights) -> None:
    got, want = _metrics(run), _metrics(reference)
    assert [m["step"] for m in got] == [1, 2, 3]
    for g, w in zip(got, want, strict=True):
        for key in ("loss", "grad_norm", "trained_tokens", "reward_mean"):
            assert g[key] == pytest.approx(w[key], rel=1e-4, abs=1e-6), f"{run.name} step {g['step']} {key}"
    want_w = _full_weights(reference / "checkpoints" / "step-000003")
    for name, tensor in want_w.items():
        torch.testing.assert_close(weights[name], tensor, atol=2e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("name", ["as-fsdp2", "as-ddp", "one-as-fsdp2"])
def test_a_sharded_checkpoint_resumes_under_another_strategy(runs, name):
    _assert_same(runs / name, runs / "one-3", _sharded_weights(runs / name / "checkpoints" / "step-000003"))


def test_a_sharded_checkpoint_resumes_in_one_process_writing_full_ones(runs):
    _assert_same(runs / "as-one", runs / "one-3", _full_weights(runs / "as-one" / "checkpoints" / "step-000003"))


def test_each_rank_writes_its_own_shard(runs):
    checkpoint = runs / "fsdp2-first" / "checkpoints" / "step-000002"
    shards = sorted(p.name for p in (checkpoint / ckpt.SHARDED_DIR).iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert all((checkpoint / ckpt.SHARDED_DIR / s).stat().st_size > 1000 for s in shards[1:])
    assert not list((checkpoint / "model").glob("*.safetensors"))
    assert ckpt.checkpoint_problem(checkpoint) is None
    assert ckpt.load_trainer_state(checkpoint).optimizer == {}


def test_a_damaged_shard_is_passed_over(runs, tmp_path):
    run = _copy_run(runs / "fsdp2-first", tmp_path / "run")
    shard = run / "checkpoints" / "step-000002" / ckpt.SHARDED_DIR / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-10])
    found = ckpt.find_loadable(run)
    assert found.path == run / "checkpoints" / "step-000001"
    assert "__1_0.distcp" in found.damaged[0][1]
    (run / "checkpoints" / "step-000001" / "manifest.json").unlink()  # no manifest: the shard index still checks
    shard = run / "checkpoints" / "step-000001" / ckpt.SHARDED_DIR / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-10])
    assert "__0_0.distcp" in ckpt.checkpoint_problem(run / "checkpoints" / "step-000001")


def test_export_refuses_a_sharded_checkpoint(runs, tmp_path):
    with pytest.raises(ValueError, match="checkpoint.format=full"):
        export_checkpoint(runs / "fsdp2-first" / "checkpoints" / "step-000002", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["", "checkpoints/step-000002", "checkpoints/step-000002/model"])
def test_init_from_refuses_a_sharded_checkpoint(runs, where):
    from grove.models.initial_weights import initial_model_dir
    from grove.models.pretrained import ModelLoadError

    with pytest.raises(ModelLoadError, match="checkpoint.format=full"):
        initial_model_dir(str(runs / "fsdp2-first" / where))


def test_a_failed_shard_write_leaves_the_previous_checkpoint(runs, tmp_path, monkeypatch):
    """One process: the shard write of step 2 fails (a full disk); the run stops with a CheckpointWriteError naming
    the previous checkpoint, the temporary directory is gone, and --resume continues from step 1."""
    import errno

    from tests.tiny_runs import finished_run, run_config

    import grove.training.run_checkpoint as run_checkpoint
    from grove.training.trainer import Trainer

    real = run_checkpoint.save_sharded_state

    def full_disk_at_step_2(model, optimizer, directory):
        if directory.parent.name.endswith("step-000002"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(model, optimizer, directory)

    monkeypatch.setattr(run_checkpoint, "save_sharded_state", full_disk_at_step_2)
    run = tmp_path / "run"
    with pytest.raises(ckpt.CheckpointWriteError, match="step-000001 is intact"):
        finished_run(runs / "tiny", run, 2, **{"checkpoint.format": "sharded"})
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-000001"]
    assert ckpt.find_loadable(run).path == run / "checkpoints" / "step-000001"
    monkeypatch.setattr(run_checkpoint, "save_sharded_state", real)
    Trainer(run_config(runs / "tiny", run, 2, **{"checkpoint.format": "sharded"}), run, resume=True).run()
    assert ckpt.find_loadable(run).path == run / "checkpoints" / "step-000002"
