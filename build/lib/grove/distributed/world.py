"""The process world of a run: rank, size, device and backend, read from the launcher's environment, and the
few collectives grove issues itself, each named by the phase it belongs to.

``torchrun`` (and ``accelerate launch``) export ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; :func:`init_world` joins the process group from them (``env://`` rendezvous), with ``gloo`` on
CPU and ``nccl`` on CUDA, and places rank ``r`` on ``cuda:LOCAL_RANK`` when a GPU is there. Without those
variables the run is one process and every collective below is the identity, so the single-process path has
no distributed code in it at all.

Every collective goes through :meth:`World.collective`: the process group's timeout
(``distributed.timeout_seconds``) bounds it, and a failure or timeout is re-raised as a
:class:`CollectiveError` naming this rank and the phase (``"rollout: dynamic sampling"``,
``"update: loss scale"``, ``"checkpoint"``...), so a rank that died or hangs shows up as a message like
``rank 0/2: collective 'update: loss scale' failed after 600 s: ...`` instead of a silent hang.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = ["CollectiveError", "World", "derived_seed", "init_world", "launched_by_torchrun"]

T = TypeVar("T")


class CollectiveError(RuntimeError):
    """A collective failed or timed out; the message names the rank and the phase."""


def launched_by_torchrun() -> bool:
    """Whether the launcher's environment describes a multi-process world (``WORLD_SIZE > 1``)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def derived_seed(seed: int, rank: int) -> int:
    """Rank ``rank``'s seed for its rollout sampling: the run seed itself on rank 0 (so a 1-process run is the
    same with or without a launcher), a stable hash of ``(seed, rank)`` on the others."""
    if rank == 0:
        return seed
    digest = hashlib.sha256(f"grove-rank-seed:{seed}:{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@dataclass(frozen=True)
class World:
    """This process's place in the run. ``size == 1``: no process group, collectives are the identity."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None
    timeout_seconds: float = 1800.0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes metrics, samples, plots and checkpoints."""
        return self.rank == 0

    @property
    def label(self) -> str:
        return f"rank {self.rank}/{self.size}"

    # ------------------------------------------------------------------ sharding
    def shard(self, count: int) -> tuple[int, int]:
        """``[start, end)`` of this rank's contiguous share of ``count`` items (groups): near-equal, earlier ranks
        take the remainder, the same split as ``torch.tensor_split``."""
        base, extra = divmod(count, self.size)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (1 if self.rank < extra else 0)

    # ------------------------------------------------------------------ collectives
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Re-raise a collective failure inside the block (ours or a DDP/FSDP reduction) naming rank and phase."""
        try:
            yield
        except CollectiveError:
            raise
        except (RuntimeError, dist.DistError) as exc:
            if not self.distributed or not _is_collective_failure(exc):
                raise
            raise CollectiveError(
                f"{self.label}: collective {name!r} failed or timed out (limit {self.timeout_seconds:.0f} s, "
                f"distributed.timeout_seconds): {exc}. Another rank probably crashed or is stuck: read its log."
            ) from exc

    def collective(self, phase: str, fn: Callable[[], T]) -> T:
        with self.phase(phase):
            return fn()

    def sum_floats(self, values: list[float], phase: str) -> list[float]:
        """Element-wise sum over ranks (float64, so counts stay exact)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device)
        self.collective(phase, lambda: dist.all_reduce(t, op=dist.ReduceOp.SUM))
        return t.cpu().tolist()

    def max_int(self, value: int, phase: str) -> int:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.long, device=self._comm_device)
        self.collective(phase, lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX))
        return int(t.item())

    def any(self, flag: bool, phase: str) -> bool:
        """Whether ``flag`` is true on some rank."""
        return self.max_int(int(flag), phase) > 0

    def gather_objects(self, obj: Any, phase: str) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        self.collective(phase, lambda: dist.all_gather_object(out, obj))
        return out

    def mean_over_ranks(self, values: dict[str, float], phase: str) -> dict[str, float]:
        """Each key's mean over the ranks that report it (per-rank statistics of equal-sized shares)."""
        if not self.distributed:
            return dict(values)
        per_rank = self.gather_objects(values, phase)
        keys = dict.fromkeys(k for d in per_rank for k in d)
        return {k: sum(d[k] for d in per_rank if k in d) / sum(1 for d in per_rank if k in d) for k in keys}

    def broadcast_object(self, obj: Any, phase: str) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        self.collective(phase, lambda: dist.broadcast_object_list(box, src=0))
        return box[0]

    def barrier(self, phase: str) -> None:
        if self.distributed:
            self.collective(phase, dist.barrier)

    @property
    def _comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")

    def close(self, together: bool = False) -> None:
        """Leave the process group. ``together`` (a run that ended normally on every rank): first meet the other
        ranks, so that no rank tears its connections down while another still uses them (gloo aborts a rank whose
        peer vanished mid-exchange). Failure paths leave at once: the other ranks may be gone."""
        if self.distributed and dist.is_initialized():
            if together:
                self.barrier("end of the run")
            dist.destroy_process_group()


def _is_collective_failure(exc: BaseException) -> bool:
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc).lower()
    return any(s in text for s in ("timed out", "timeout", "gloo", "nccl", "connection closed", "connection reset"))


def uses_cuda(device: str) -> bool:
    """Whether ranks placed with ``distributed.device`` = ``device`` run on CUDA (``auto``: when CUDA is available)."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def init_world(timeout_seconds: float = 1800.0, device: str = "auto") -> World:
    """Join the process group the launcher describes, or return the one-process world.

    ``device``: ``auto`` (``cuda:LOCAL_RANK`` when CUDA is available, else CPU), ``cpu`` or ``cuda``.
    """
    rank = int(os.environ.get("RANK", "0"))
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    use_cuda = uses_cuda(device)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("distributed.device is 'cuda' but torch sees no CUDA device; use 'auto' or 'cpu'")
    placed = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1)) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(placed)
    if size == 1:
        return World(device=placed, timeout_seconds=timeout_seconds)
    backend = "nccl" if use_cuda else "gloo"
    if not dist.is_initialized():
        try:
            dist.init_process_group(
                backend, timeout=datetime.timedelta(seconds=timeout_seconds), device_id=placed if use_cuda else None
            )
        except Exception as exc:  # rendezvous failures: name the rank and the variables that drive it
            raise CollectiveError(
                f"rank {rank}/{size}: could not join the process group ({backend}, MASTER_ADDR="
                f"{os.environ.get('MASTER_ADDR')!r}, MASTER_PORT={os.environ.get('MASTER_PORT')!r}): {exc}"
            ) from exc
    return World(rank, size, local_rank, placed, backend, timeout_seconds)
