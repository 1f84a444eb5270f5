"""Process runtime settings: torch threads, the host allocator policy (``host_allocator``) and the oneDNN cache sizes."""

from __future__ import annotations

import ctypes
import sys
import types

import pytest
import torch

from grove.config import ConfigError
from grove.infra import runtime
from grove.resolve import load_config, resolve

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"),
    reason="mallopt semantics are glibc's",
)


def test_system_policy_changes_nothing() -> None:
    assert runtime.configure_host_allocator("system") is False


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="host_allocator"):
        runtime.configure_host_allocator("jemalloc")


def _fake_glibc(monkeypatch, calls: list[tuple[int, int]], refuse_mmap_above: int | None = None) -> None:
    """Stand in for glibc: record ``mallopt`` calls, optionally refusing large mmap thresholds."""

    def mallopt(param: int, value: int) -> int:
        calls.append((param, value))
        return 0 if refuse_mmap_above is not None and param == -3 and value > refuse_mmap_above else 1

    libc = types.SimpleNamespace(gnu_get_libc_version=lambda: b"2.36", mallopt=mallopt)
    monkeypatch.setattr(runtime, "_libc", None)
    monkeypatch.setattr(runtime.sys, "platform", "linux")
    monkeypatch.setattr(runtime.ctypes, "CDLL", lambda name: libc)


def test_retain_sets_glibc_thresholds_once(monkeypatch) -> None:
    calls: list[tuple[int, int]] = []
    _fake_glibc(monkeypatch, calls)
    assert runtime.configure_host_allocator("retain") is True
    assert calls == [(-3, 1 << 30), (-1, (1 << 31) - 1)]  # M_MMAP_THRESHOLD 1 GiB, M_TRIM_THRESHOLD ~2 GiB
    assert runtime.configure_host_allocator("retain") is True and len(calls) == 2  # applied once per process


def test_retain_falls_back_to_glibc_maximum_when_refused(monkeypatch) -> None:
    calls: list[tuple[int, int]] = []
    _fake_glibc(monkeypatch, calls, refuse_mmap_above=32 << 20)
    assert runtime.configure_host_allocator("retain") is True
    assert calls[:2] == [(-3, 1 << 30), (-3, 32 << 20)]


def test_release_host_memory_trims_only_under_retain(monkeypatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(runtime, "_libc", None)
    runtime.release_host_memory()  # system / not applied: nothing to call
    monkeypatch.setattr(runtime, "_libc", types.SimpleNamespace(malloc_trim=trims.append))
    runtime.release_host_memory()
    assert trims == [0]


def test_retain_is_a_no_op_without_glibc(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "_libc", None)
    monkeypatch.setattr(runtime.sys, "platform", "darwin")
    assert runtime.configure_host_allocator("retain") is False


@glibc
def test_retain_really_applies_in_this_process() -> None:
    assert runtime.configure_host_allocator("retain") is True
    buffer = torch.empty(64 * 2**20 // 4)  # a 64 MiB tensor now comes from the heap; still usable
    buffer.fill_(1.0)
    assert float(buffer.sum()) == buffer.numel()


def test_configure_runtime_sets_threads() -> None:
    before = torch.get_num_threads()
    try:
        runtime.configure_runtime(1, "system")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_config_fields_validate_and_reach_the_loss_components() -> None:
    cfg = load_config("examples/arithmetic.yaml", ["train.logit_cache_mb=0", "host_allocator=system"])
    assert cfg.host_allocator == "system"
    assert resolve(cfg, preflight_checks=False).components.loss.logit_cache_bytes == 0
    arithmetic = resolve(load_config("examples/arithmetic.yaml", []), preflight_checks=False)
    assert arithmetic.components.loss.logit_cache_bytes == 512 * 2**20
    with pytest.raises(ConfigError, match="host_allocator"):
        load_config("examples/arithmetic.yaml", ["host_allocator=tcmalloc"])
    with pytest.raises(ConfigError, match="logit_cache_mb"):
        load_config("examples/arithmetic.yaml", ["train.logit_cache_mb=-1"])


def test_runtime_settings_carry_every_runtime_key_to_configure_runtime(monkeypatch) -> None:
    """cfg.runtime_settings() is what the trainer, `grove eval` and the config-driven benchmarks apply: every runtime
    key of the config, with an optional thread override, reaching the process."""
    cfg = load_config("examples/arithmetic.yaml", ["threads=1", "host_allocator=system",
                                                   "mkldnn_lru_cache_entries=32", "onednn_primitive_cache_entries=null"])
    assert cfg.runtime_settings() == {"threads": 1, "host_allocator": "system", "mkldnn_lru_cache_entries": 32,
                                      "onednn_primitive_cache_entries": None}
    assert cfg.runtime_settings(threads=2)["threads"] == 2
    defaults = load_config("examples/arithmetic.yaml", []).runtime_settings()
    assert (defaults["mkldnn_lru_cache_entries"], defaults["onednn_primitive_cache_entries"]) == (64, 128)
    monkeypatch.delenv(runtime.LRU_CACHE_VARIABLE, raising=False)
    monkeypatch.delenv(runtime.ONEDNN_CACHE_VARIABLE, raising=False)
    before = torch.get_num_threads()
    try:
        runtime.configure_runtime(**cfg.runtime_settings())
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert runtime.os.environ[runtime.LRU_CACHE_VARIABLE] == "32"
    assert runtime.ONEDNN_CACHE_VARIABLE not in runtime.os.environ


def test_mkldnn_lru_cache_entries_set_the_variable(monkeypatch) -> None:
    monkeypatch.delenv(runtime.LRU_CACHE_VARIABLE, raising=False)
    assert runtime.configure_mkldnn_lru_cache(None) is False
    assert runtime.LRU_CACHE_VARIABLE not in runtime.os.environ
    assert runtime.configure_mkldnn_lru_cache(64) is True
    assert runtime.os.environ[runtime.LRU_CACHE_VARIABLE] == "64"
    runtime.configure_runtime(None, "system", 64)  # the same value again: still set
    assert runtime.os.environ[runtime.LRU_CACHE_VARIABLE] == "64"


def test_a_user_set_lru_cache_capacity_wins(monkeypatch) -> None:
    monkeypatch.setenv(runtime.LRU_CACHE_VARIABLE, "512")
    assert runtime.configure_mkldnn_lru_cache(64) is False
    assert runtime.os.environ[runtime.LRU_CACHE_VARIABLE] == "512"
    with pytest.raises(ValueError, match="mkldnn_lru_cache_entries"):
        runtime.configure_mkldnn_lru_cache(0)


def test_onednn_primitive_cache_entries_set_the_variable(monkeypatch) -> None:
    monkeypatch.delenv(runtime.ONEDNN_CACHE_VARIABLE, raising=False)
    assert runtime.configure_onednn_primitive_cache(None) is False
    assert runtime.ONEDNN_CACHE_VARIABLE not in runtime.os.environ
    runtime.configure_runtime(None, "system", None, 128)
    assert runtime.os.environ[runtime.ONEDNN_CACHE_VARIABLE] == "128"
    monkeypatch.setenv(runtime.ONEDNN_CACHE_VARIABLE, "1024")
    assert runtime.configure_onednn_primitive_cache(128) is False  # the user's environment wins
    assert runtime.os.environ[runtime.ONEDNN_CACHE_VARIABLE] == "1024"
    with pytest.raises(ValueError, match="onednn_primitive_cache_entries"):
        runtime.configure_onednn_primitive_cache(0)


def test_mkldnn_lru_cache_entries_in_the_config() -> None:
    assert load_config("examples/arithmetic.yaml", []).mkldnn_lru_cache_entries == 64
    assert load_config("examples/arithmetic.yaml", ["mkldnn_lru_cache_entries=null"]).mkldnn_lru_cache_entries is None
    with pytest.raises(ConfigError, match="mkldnn_lru_cache_entries"):
        load_config("examples/arithmetic.yaml", ["mkldnn_lru_cache_entries=0"])
    assert load_config("examples/arithmetic.yaml", []).onednn_primitive_cache_entries == 128
    with pytest.raises(ConfigError, match="onednn_primitive_cache_entries"):
        load_config("examples/arithmetic.yaml", ["onednn_primitive_cache_entries=0"])


_CACHE_GROWTH = """
import ctypes, sys
from grove.infra.runtime import configure_mkldnn_lru_cache, configure_onednn_primitive_cache
configure_mkldnn_lru_cache(int(sys.argv[1]))
configure_onednn_primitive_cache(int(sys.argv[2]))
import torch
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "abcdefghij"]
mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
torch.set_num_threads(1)
weight = torch.randn(256, 128, dtype=torch.bfloat16)
before = mallinfo2().h
for rows in range(1, 201):  # 200 input shapes, each a new oneDNN operator
    torch.nn.functional.linear(torch.randn(rows, 128, dtype=torch.bfloat16), weight)
print(mallinfo2().h - before)
"""


@glibc
@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="bf16 products go through oneDNN")
def test_the_installed_torch_honours_both_cache_bounds() -> None:
    """The variables are ideep's and oneDNN's: a new torch that stopped reading them would let the caches grow."""
    import subprocess

    def growth(lru_entries: int, primitive_entries: int) -> int:
        env = {k: v for k, v in runtime.os.environ.items()
               if k not in (runtime.LRU_CACHE_VARIABLE, runtime.ONEDNN_CACHE_VARIABLE)}
        done = subprocess.run([sys.executable, "-c", _CACHE_GROWTH, str(lru_entries), str(primitive_entries)],
                              capture_output=True, text=True, env=env, check=True)
        return int(done.stdout.split()[-1])

    defaults, ideep_bounded, both_bounded = growth(1024, 1024), growth(8, 1024), growth(8, 8)
    assert defaults - ideep_bounded > 20 * 2**20, (defaults, ideep_bounded)  # measured: 111 vs 59 MB
    assert ideep_bounded - both_bounded > 20 * 2**20, (ideep_bounded, both_bounded)  # 59 MB vs < 1 MB
