"""Process-wide CPU runtime settings a run applies before it loads a model: torch threads, the host
memory allocator policy and the sizes of the two oneDNN operator caches (``threads``, ``host_allocator``,
``mkldnn_lru_cache_entries`` and ``onednn_primitive_cache_entries`` in the config).

Why the allocator matters: glibc serves every allocation above its mmap threshold (at most 32 MiB with the
default dynamic threshold) with a fresh ``mmap`` and returns it with ``munmap`` on free. An RL step
allocates and frees ``[tokens, vocab]`` float32 buffers of 50-200 MB many times, and every fresh mapping is
page-faulted in again (writing into a fresh buffer costs several times writing into a reused one).
``retain`` raises the mmap threshold to 1 GiB and the trim threshold to 2 GiB with ``mallopt``, so those
buffers are recycled inside the heap; it is the effect the PyTorch CPU tuning guide gets from jemalloc or
tcmalloc via ``LD_PRELOAD``, without a preload: a faster policy update at about the same peak RSS (measured by
``benchmarks/vs_trl.py --impls grove --set host_allocator=system`` against ``=retain``; results in
``docs/benchmarks.md``).

Why the operator cache matters: PyTorch's oneDNN integration (ideep) keeps the operator it set up for each
input shape in an LRU cache of ``LRU_CACHE_CAPACITY`` entries (1024 by default), and each entry keeps its oneDNN
primitive alive (a few hundred KB of JIT kernels and descriptors for a bf16 product) even after oneDNN's own
primitive cache has let it go. An RL step meets a new shape at every decode step (the cached length grows,
finished rows drop) and in every micro-batch, so the cache fills over the first steps of a run, and the heap in
use grows with it until the cache is full. With 64 entries a run levels off lower at the same speed.
oneDNN's own primitive cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, 1024) holds the rest, and its primitives,
created during the update among the update's short-lived buffers, also fragment the heap (its size at the update's
peak grows over the steps): 128 entries lower a bf16 run's peak RSS with the same samples and no slower steps (a
miss re-creates a JIT kernel: generation alone is slightly slower at 256 entries, whole steps are not). Both are
measured by ``benchmarks/step_memory.py`` (``--set mkldnn_lru_cache_entries=null``,
``--set onednn_primitive_cache_entries=null``); results in ``docs/benchmarks.md``. Variables set in the environment
win over the config.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

import torch

__all__ = [
    "configure_host_allocator", "configure_mkldnn_lru_cache", "configure_onednn_primitive_cache", "configure_runtime",
    "release_host_memory",
]

log = logging.getLogger(__name__)

# mallopt parameter numbers from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 1 << 30  # allocations below 1 GiB come from the heap ...
_FALLBACK_MMAP_THRESHOLD = 32 << 20  # ... or below glibc's own maximum where a larger value is refused
_TRIM_THRESHOLD = (1 << 31) - 1  # and up to ~2 GiB of freed heap stays mapped (mallopt takes an int)

_libc: ctypes.CDLL | None = None  # glibc, once ``retain`` has been applied to this process

LRU_CACHE_VARIABLE = "LRU_CACHE_CAPACITY"  # read by ideep when its operator cache is first used
ONEDNN_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"  # read by oneDNN when its primitive cache is first used


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None  # musl and others: no glibc mallopt semantics
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def configure_host_allocator(policy: str) -> bool:
    """Apply ``host_allocator: retain | system``; returns whether the process's allocator was changed.

    ``system`` changes nothing. ``retain`` is applied once per process (mallopt settings are global and
    cannot be scoped) and is a no-op, with a log line, where the C library is not glibc.
    """
    global _libc
    if policy not in ("retain", "system"):
        raise ValueError(f"host_allocator must be 'retain' or 'system', got {policy!r}")
    if policy == "system":
        return False
    if _libc is not None:
        return True
    libc = _glibc()
    if libc is None:
        log.info("host_allocator: retain needs glibc; leaving the C library's allocator as it is")
        return False
    threshold = _MMAP_THRESHOLD
    if libc.mallopt(_M_MMAP_THRESHOLD, threshold) != 1:
        threshold = _FALLBACK_MMAP_THRESHOLD
        if libc.mallopt(_M_MMAP_THRESHOLD, threshold) != 1:
            log.warning("host_allocator: retain: mallopt(M_MMAP_THRESHOLD) was refused; allocator unchanged")
            return False
    libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    _libc = libc
    log.info("host_allocator: retain (mmap threshold %d MiB, trim threshold %d MiB)", threshold >> 20,
             _TRIM_THRESHOLD >> 20)
    return True


def release_host_memory() -> None:
    """Under ``retain``, hand the heap's free pages back to the OS (glibc ``malloc_trim``) at a phase
    boundary (after generation, after the update). Within a phase the big buffers are recycled without page
    faults; across phases, the previous phase's free blocks (of other sizes) would otherwise fragment the
    heap and raise peak RSS (measured: bf16 step +0.9 GB without this). No-op under ``system``."""
    if _libc is not None and hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)


def _cache_size_variable(variable: str, key: str, entries: int | None) -> bool:
    """Put ``entries`` in the environment variable ``variable`` (config key ``key``) unless the user already set it
    there; ``None`` leaves the library's default. Returns whether it was set."""
    if entries is None:
        return False
    if entries < 1:
        raise ValueError(f"{key} must be at least 1 (or null), got {entries}")
    current = os.environ.get(variable)
    if current is not None and current != str(entries):
        log.info("%s: keeping %s=%s from the environment", key, variable, current)
        return False
    os.environ[variable] = str(entries)
    return True


def configure_mkldnn_lru_cache(entries: int | None) -> bool:
    """Bound PyTorch's oneDNN operator cache (ideep's LRU) to ``entries`` shapes (``mkldnn_lru_cache_entries``; see
    the module docstring); returns whether it was set. ``None`` leaves PyTorch's default, and a value the user
    already put in the environment (``LRU_CACHE_CAPACITY``) is kept. ideep reads the variable when its cache is
    first used, so a process that has already run a oneDNN operator keeps the size it started with."""
    return _cache_size_variable(LRU_CACHE_VARIABLE, "mkldnn_lru_cache_entries", entries)


def configure_onednn_primitive_cache(entries: int | None) -> bool:
    """Bound oneDNN's own primitive cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, oneDNN's default 1024) to
    ``entries`` (``onednn_primitive_cache_entries``); the same rules as :func:`configure_mkldnn_lru_cache`."""
    return _cache_size_variable(ONEDNN_CACHE_VARIABLE, "onednn_primitive_cache_entries", entries)


def configure_runtime(
    threads: int | None,
    host_allocator: str,
    mkldnn_lru_cache_entries: int | None = None,
    onednn_primitive_cache_entries: int | None = None,
) -> None:
    """Set torch's intra-op threads (``None``: leave torch's default, all cores), the allocator policy and the
    sizes of the two oneDNN operator caches (``None``: the libraries' defaults)."""
    if threads:
        torch.set_num_threads(threads)
    configure_host_allocator(host_allocator)
    configure_mkldnn_lru_cache(mkldnn_lru_cache_entries)
    configure_onednn_primitive_cache(onednn_primitive_cache_entries)
