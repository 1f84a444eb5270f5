"""Config fuzzing: any ``--set`` list or YAML document either loads or raises a ``ConfigError`` naming a key or
the file; no other exception escapes ``load_config``, and ``grove config show`` exits 0 or 2 without a traceback.

The default run draws 200 examples per property; ``-m fuzz`` runs 3000 (not part of the default run).
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typer.testing import CliRunner

import grove.builtin_components  # noqa: F401  (fills the registries the keys and ids come from)
from grove.cli import app
from grove.config import ConfigError, GroveConfig
from grove.registry import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    REWARD_COMBINERS,
    REWARD_FUNCTIONS,
)
from grove.resolve import load_config
from grove.tasks.task import TASKS

FAST = settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=3000, deadline=None, database=None, suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------------------------------- the config's keys
def _submodels(annotation) -> list[tuple[str, type[BaseModel]]]:
    """``(suffix, model)`` for the pydantic models inside an annotation: ``""`` direct or optional, ``".0"`` as the
    items of a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple):
        return [(".0" + suffix, model) for a in args for suffix, model in _submodels(a)]
    if origin in (typing.Union, types.UnionType):
        return [item for a in args for item in _submodels(a)]
    return []


def config_keys(model: type[BaseModel] = GroveConfig, prefix: str = "") -> list[str]:
    """Every key of the schema, dotted (``train.steps``, ``rewards.0.weight``, ``selection.samples.ratio.kind``)."""
    keys: list[str] = []
    for name, field in model.model_fields.items():
        path = prefix + name
        keys.append(path)
        for suffix, sub in _submodels(field.annotation):
            if suffix:
                keys.append(path + suffix)
            keys += config_keys(sub, f"{path}{suffix}.")
    return keys


def component_keys() -> list[str]:
    """The parameters of every registered component, under the keys that select them."""
    keys = []
    for prefix, registry in (
        ("task", TASKS),
        ("algorithm.advantage", ADVANTAGE_ESTIMATORS),
        ("algorithm.policy_loss", POLICY_LOSSES),
        ("algorithm.reward_combination", REWARD_COMBINERS),
        ("rewards.0", REWARD_FUNCTIONS),
    ):
        for id_ in registry.ids():
            keys += [f"{prefix}.{param}" for param in registry.entry(id_).params.model_fields]
    return sorted(set(keys))


REAL_KEYS = sorted(set(config_keys()) | set(component_keys()))
SECTIONS = list(GroveConfig.model_fields)
NONEXISTENT = [
    "nonexistent.key", "train.nope", "a.b.c.d", "", ".", "..", "train.", ".train", "train..steps", "rewards.5.weight",
    "rewards.x", "rewards.-1.weight", "0", "rewards.0.0", "train.steps.x", "model.name.x", " train . steps ",
    "TRAIN.STEPS", "env.params.id", "env.params.1", "algorithm.preset.x", "selection.samples.ratio.kind.x",
]
IDS = sorted(
    set(TASKS.ids()) | set(ADVANTAGE_ESTIMATORS.ids()) | set(POLICY_LOSSES.ids()) | set(REWARD_COMBINERS.ids())
    | set(REWARD_FUNCTIONS.ids())
)
WORDS = [
    *IDS, "grpo", "dapo", "d3s", "gdpo", "token_mean", "k3", "low_var_k3", "bf16", "fp32", "packed", "padded",
    "shared_prefix", "cosine", "linear", "step", "constant", "group", "batch", "sequence", "micro_batch", "auto",
    "environment", "completions", "recompute", "mask", "loss", "reward", "error", "truncate_left", "sokoban",
    "frozenlake", "tag", "per_step", "conversation", "smollm2-135m", "fsdp2", "ddp", "float32", "bfloat16", "retain",
    "user_rewards:char_count", "nope:fn", "a:b:c", "os:system", ":", "x:", ":y", ".relative", "..", "",
]
GARBAGE = [
    "[", "]", "{", "}", "{a: ", "[{id: x", "[1, 2", "!!python/object/apply:os.system ['true']", "!!binary /w==",
    "!!binary AAAA", "!!set {a, b}", "!!omap [a: 1]", "!!pairs [a: 1]", "*alias", "&anchor", "&a [*a]", "- -", ": :",
    "'unterminated", '"unterminated', "%TAG ! tag:x", "\t", "? a", "|", ">", "@", "`", "!!int abc", "!!float x",
    "!!int 1.5", "!!bool maybe", "!!null x", "!!str", "!!map [1]", "!!seq {a: 1}", "2020-13-45", "2021-02-30",
    "2021-02-03 25:61:61", "2021-01-01", "2021-01-01T10:00:00Z", "!!timestamp 2020-01-01", "!!timestamp nope",
    "[" * 50, "{" * 50, "[" * 300 + "]" * 300, "a: b: c", "x\x00y", "\x85", "\ufeff", "---", "...", "--- a\n--- b",
    "!custom 1", "!<tag:x> 1", "0x1F", "0o17", "1_000", "1:30", "+.inf", "-.inf", ".nan", ".NaN", "1e3", "1.0e+3",
    "0b101", "017", "=", "==", "a=b", "{id: grpo, id: rloo}", "{<<: {a: 1}}", "[<<]", "{? [1]: 2}", "{[1]: 2}",
]

_scalar_text = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.integers().map(str),
    st.sampled_from(["10" * 20, "-" + "9" * 30, "0", "-1", "1", "2", "8", "64"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from([".inf", "-.inf", ".nan", "1.5", "-3.25", "1e-3", "2.0e-5", "0.0", "-0.0", "1e309"]),
    st.sampled_from(["true", "false", "yes", "no", "on", "off", "True", "FALSE"]),
    st.sampled_from(["null", "~", "", "Null", " "]),
    st.sampled_from(WORDS),
    st.text(max_size=12),
    st.text(max_size=12).map(json.dumps),
)
_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-1000, 1000), st.floats(-1e6, 1e6), st.sampled_from(WORDS), st.text(max_size=6)
)
_json_keys = st.one_of(st.sampled_from(sorted({k.rsplit(".", 1)[-1] for k in REAL_KEYS})), st.text(max_size=6))
_json_values = st.recursive(
    _json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_json_keys, children, max_size=4),
    max_leaves=12,
)
VALUES = st.one_of(
    _scalar_text,
    _json_values.map(json.dumps),
    _json_values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()),
    st.sampled_from(GARBAGE),
)


def _typo(key: str) -> st.SearchStrategy[str]:
    return st.sampled_from(
        [key[:-1], key + "s", key.replace(".", "_", 1), key.replace("_", "", 1), key.upper(), key[1:], f"{key}.x"]
    )


KEYS = st.one_of(
    st.sampled_from(REAL_KEYS),
    st.sampled_from(REAL_KEYS).flatmap(_typo),
    st.sampled_from(NONEXISTENT),
    st.text(max_size=10),
)
OVERRIDE = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", KEYS, VALUES),
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(REAL_KEYS), VALUES),  # more often past the key checks
    st.text(max_size=15),  # maybe without '='
)
OVERRIDES = st.lists(OVERRIDE, max_size=6)

_section_values = st.one_of(
    _json_values,
    st.dictionaries(_json_keys, _json_values, max_size=4),
    st.dictionaries(st.sampled_from(REAL_KEYS).map(lambda k: k.rsplit(".", 1)[-1]), _json_values, max_size=4),
)
DOCUMENTS = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(SECTIONS), st.text(max_size=8)), _section_values, max_size=6).map(
        lambda d: yaml.safe_dump(d, sort_keys=False)
    ),
    _json_values.map(json.dumps),
    st.sampled_from(GARBAGE),
    st.text(max_size=60),
    st.lists(st.sampled_from(GARBAGE + [f"{s}:" for s in SECTIONS] + ["  steps: 3", "- a", "  - b"]), max_size=6).map(
        "\n".join
    ),
)


# ------------------------------------------------------------------------------------------------- the properties
def _names(overrides: list[str], path: Path | None) -> set[str]:
    """What a ConfigError may name: a section, a key the overrides used, the file, or the --set item."""
    names = set(SECTIONS) | {"--set"}
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        names |= {part.strip() for part in key.split(".") if part.strip()}
    if path is not None:
        names.add(str(path))
    return names


def check_load(path: Path | None, overrides: list[str]) -> None:
    try:
        cfg = load_config(path, overrides)
    except ConfigError as exc:
        message = str(exc)
        assert message.strip(), "an empty ConfigError"
        assert any(name in message for name in _names(overrides, path)), f"names no key or file: {message}"
        return
    assert isinstance(cfg, GroveConfig)


def check_cli(overrides: list[str]) -> None:
    args = [arg for item in overrides for arg in ("--set", item)]
    result = CliRunner().invoke(app, ["config", "show", "--no-memory", *args])
    escaped = None if isinstance(result.exception, SystemExit | None) else result.exception
    assert escaped is None, f"{type(escaped).__name__}: {escaped} for {args}"
    assert result.exit_code in (0, 2), (args, result.output)
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "config.yaml"


@FAST
@given(overrides=OVERRIDES)
def test_set_overrides_load_or_raise_config_error(overrides):
    check_load(None, overrides)


@FAST
@given(document=DOCUMENTS, overrides=st.lists(OVERRIDE, max_size=2))
def test_yaml_documents_load_or_raise_config_error(config_file, document, overrides):
    config_file.write_text(document, encoding="utf-8", errors="surrogatepass")
    check_load(config_file, overrides)


@FAST
@given(overrides=st.lists(OVERRIDE, max_size=4))
def test_config_show_exits_0_or_2_without_traceback(overrides):
    check_cli(overrides)


@pytest.mark.fuzz
@LONG
@given(overrides=OVERRIDES)
def test_set_overrides_load_or_raise_config_error_long(overrides):
    check_load(None, overrides)


@pytest.mark.fuzz
@LONG
@given(document=DOCUMENTS, overrides=st.lists(OVERRIDE, max_size=2))
def test_yaml_documents_load_or_raise_config_error_long(config_file, document, overrides):
    config_file.write_text(document, encoding="utf-8", errors="surrogatepass")
    check_load(config_file, overrides)


@pytest.mark.fuzz
@LONG
@given(overrides=st.lists(OVERRIDE, max_size=4))
def test_config_show_exits_0_or_2_without_traceback_long(overrides):
    check_cli(overrides)


# --------------------------------------------------------------------- what the fuzzer found, kept as examples
@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.preset=[1]"],
        ["algorithm.preset={a: 1}"],
        ["imports=[.relative]"],
        ['imports=[""]'],
        ["env={id: sokoban, params: {id: 3}}"],
        ["output_dir=2020-13-45"],
        ["rewards=[{id: x"],
        ["=1"],
        ["train..steps=1"],
        ["rewards=[{id: 'a:b', x: !!binary /w==}]"],
    ],
)
def test_found_by_the_fuzzer(overrides):
    check_load(None, overrides)
    check_cli(overrides)


@pytest.mark.parametrize("document", ["?", "train: {? : 1}", "rewards: [{id: x, ? : 2}]"])
def test_yaml_documents_found_by_the_fuzzer(config_file, document):
    """A key with no name (YAML ``?``) is refused with the file named, not as pydantic's ``None: ...``."""
    config_file.write_text(document, encoding="utf-8")
    with pytest.raises(ConfigError, match="a key with no name"):
        load_config(config_file, [])
    check_load(config_file, [])
