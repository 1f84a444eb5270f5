"""The ``distributed`` section: how a run launched by ``torchrun`` / ``accelerate launch`` shares its work
(docs/distributed.md). A run started without a launcher is one process and ignores it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grove.config.sections import Section


class DistributedConfig(Section):
    strategy: Literal["ddp", "fsdp2"] = Field(
        "ddp",
        description="With several processes: 'ddp' (DistributedDataParallel: full model and optimizer state on every "
        "rank, gradients all-reduced once per optimizer step) or 'fsdp2' (fully_shard: parameters, gradients and AdamW "
        "state sharded over the ranks, each decoder layer gathered only while it runs). One process: ignored.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where each rank runs: 'auto' = cuda:LOCAL_RANK when CUDA is available (NCCL), else CPU (gloo)."
    )
    timeout_seconds: float = Field(
        1800.0,
        gt=0,
        description="A collective (gradient reduction, batch gather, checkpoint gather, waiting for rank 0's "
        "evaluation) that does not complete within this many seconds fails with an error naming the rank and phase.",
    )
