"""One rank of a 2-process world (or a plain one-process run) for tests/test_distributed_equivalence.py.

It trains the cases listed in a JSON file through :class:`grove.training.trainer.Trainer`, in the world the
launcher describes, with a scripted rollout engine: each completion is a pseudo-random token string seeded by
its prompt's tokens and its index in the group, so the step's batch is the same whatever the number of
processes (real sampling draws from per-rank streams). Everything after generation (rewards, the batch
gather, advantages, the sharded update, checkpoints, resume) is grove's own code path. After each case, rank 0
writes the final gradients (gathered in full) next to the run's checkpoints.
"""

from __future__ import annotations

import gc
import json
import sys
import zlib
from pathlib import Path

import torch

torch.set_num_threads(1)

import grove.training.trainer as trainer_module  # noqa: E402
from grove.distributed.world import init_world  # noqa: E402
from grove.registry import ROLLOUT_ENGINES  # noqa: E402
from grove.resolve import load_config  # noqa: E402
from grove.rollout.generated_rows import GeneratedRows  # noqa: E402
from grove.rollout.hf_engine import TransformersEngine  # noqa: E402

# each completion starts with one of these (environment actions, or an invalid one), then random tokens
WORDS = ["left", "right", "up", "down", "wait"]


def scripted_reward(prompts, completions, **kwargs):
    """A reward that varies within every group: a hash of the completion's text mapped to [0, 1]."""
    return [(zlib.crc32(c.encode()) % 5) / 4.0 for c in completions]


def agreeing_reward(prompts, completions, **kwargs):
    """:func:`scripted_reward`, except that every completion of two prompts in three (by a hash of the prompt) gets
    0.5: their groups have zero advantages, so ``train.skip_zero_advantage`` leaves them out of the update (in the
    first step one rank of two then holds no sample with a signal and runs the other's micro-batch count with weight
    0; in the second no rank has one)."""
    return [0.5 if zlib.crc32(str(p).encode()) % 3 else r for p, r in zip(prompts, scripted_reward(prompts, completions),
                                                                         strict=True)]


class ScriptedEngine(TransformersEngine):
    """Completions that depend only on (prompt tokens, index in the group), never on the rank or the RNG: a word of
    :data:`WORDS` and random tokens."""

    def _decode(self, prompt_ids, prompt_mask, n, sampling, generator, images=None):
        rows = prompt_ids.shape[0] * n
        width = sampling.max_new_tokens
        tokens = torch.full((rows, width), self.pad_token_id, dtype=torch.long)
        lengths = torch.zeros(rows, dtype=torch.long)
        vocab = self.model.config.get_text_config().vocab_size
        words = [self.tokenizer.encode(w, add_special_tokens=False) for w in WORDS]
        for i in range(prompt_ids.shape[0]):
            prompt = prompt_ids[i][prompt_mask[i].bool()].tolist()
            for j in range(n):
                g = torch.Generator().manual_seed(zlib.crc32(repr((prompt, j)).encode()))
                word = words[int(torch.randint(len(words), (1,), generator=g))][:width]
                length = int(torch.randint(len(word), width + 1, (1,), generator=g))
                tail = torch.randint(40, vocab - 40, (length - len(word),), generator=g)
                tokens[i * n + j, :length] = torch.cat([torch.tensor(word, dtype=torch.long), tail])
                lengths[i * n + j] = length
        logprobs = torch.full((rows, width), -1.0)
        return GeneratedRows(tokens, logprobs, lengths, torch.zeros(rows, dtype=torch.long))  # no prompt tokens reused


def scripted_engine(model: torch.nn.Module, tokenizer, rollout) -> ScriptedEngine:
    """The rollout engine of these runs (``rollout.engine: scripted``), registered like any other engine."""
    return ScriptedEngine(model, tokenizer, reuse_prefixes=rollout.prefix_reuse, exact_top_logits=rollout.exact_top_logits)


def full_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient in full (FSDP2 shards gathered: all ranks must call this)."""
    out = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        out[name.removeprefix("module.").removeprefix("causal_lm.")] = grad.detach().cpu().clone()
    return out


def main(spec_path: str) -> None:
    cases = json.loads(Path(spec_path).read_text())
    world = init_world(timeout_seconds=300)
    ROLLOUT_ENGINES.register("scripted")(scripted_engine)
    for case in cases:
        cfg = load_config(None, [*case["overrides"], "rollout.engine=scripted"])
        trainer = trainer_module.Trainer(cfg, Path(cfg.output_dir), resume=case.get("resume", False), world=world)
        trainer.run()
        grads = full_gradients(trainer.model)
        if world.is_main:
            torch.save(grads, Path(cfg.output_dir) / "final_grads.pt")
        world.barrier("test case done")
        del trainer  # no DDP / FSDP2 module may outlive the process group (PyTorch aborts the rank at exit)
        gc.collect()
    world.close()


if __name__ == "__main__":
    main(sys.argv[1])
