"""Registries: decorator-based lookup of components by an unambiguous id.

Every pluggable piece of grove (advantage estimators, policy losses, loss aggregations, KL
estimators, reward functions, reward combiners, environments, rollout engines, ...) lives in a :class:`Registry`. A component registers itself with a
decorator and, optionally, a pydantic model describing its parameters; the YAML config then
selects it by id and its parameters are validated against that model. Adding a component is
therefore one new file and needs no trainer edit.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

from grove.optional_packages import importable

T = TypeVar("T", bound=Callable[..., Any])


class NoParams(BaseModel):
    """Parameter model of a component that takes no parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Requires(enum.Enum):
    """An input a component needs beyond a plain rollout, declared when it registers (``requires=``); the pipeline
    provides it when the component is selected, and the front door refuses a config that cannot.

    * ``GROUPS``: several samples per prompt, for a component that compares each sample with the others of its group
      (the config refuses an estimator with it when ``train.completions_per_prompt`` is 1);
    * ``STEPS``: the environment step table ``RolloutBatch.steps`` (agent experience only);
    * ``GREEDY_BASELINE``: one greedy completion per prompt, scored, in ``RolloutBatch.baseline_scores``;
    * ``REFERENCE_LOGPROBS``: the reference policy's log-probs, so a reference model is loaded even with
      ``kl.coef: 0``.
    """

    GROUPS = "groups"
    STEPS = "steps"
    GREEDY_BASELINE = "greedy_baseline"
    REFERENCE_LOGPROBS = "reference_logprobs"


def _requirements(kind: str, id: str, requires: Sequence[Requires]) -> frozenset[Requires]:
    """``requires`` as a set, each one a :class:`Requires`."""
    wrong = [r for r in requires if not isinstance(r, Requires)]
    if wrong:
        raise TypeError(
            f"{kind} {id!r}: requires= takes grove.registry.Requires members ({', '.join(r.name for r in Requires)}), "
            f"got {wrong!r}"
        )
    return frozenset(requires)


# ---- what a component's parameter model may declare beyond its fields (found once, when the component registers)
@runtime_checkable
class ScoresSeveralObjectives(Protocol):
    """A reward whose one call scores several objectives, named by its parameters (``clinical_objectives``)."""

    def objective_names(self) -> tuple[str, ...]: ...


@runtime_checkable
class WeighsObjectives(Protocol):
    """A reward with several objectives whose parameters carry each objective's default weight (a verifiers rubric's
    ``@vf.reward(weight=...)``): the weights when the config's ``objective_weights`` names none."""

    def objective_weights(self) -> dict[str, float]: ...


@runtime_checkable
class NeedsLargerGroups(Protocol):
    """An estimator whose parameters need groups of at least this many completions (``pass_at_k``'s ``k``)."""

    def min_group_size(self) -> int: ...


@runtime_checkable
class NamesObjectives(Protocol):
    """A reward combiner whose parameters name objectives, which must exist in the run (``gated``)."""

    def check_objectives(self, names: Sequence[str]) -> None: ...


@runtime_checkable
class MayProduceAdvantages(Protocol):
    """A reward combiner that, with some parameters, returns advantages rather than scores (GDPO's renormalisation)."""

    def produces_advantages(self) -> bool: ...


@runtime_checkable
class LoadsModelWeights(Protocol):
    """A component whose parameters name a model it loads itself (a reward model, a judge): the bytes of its
    weights, a line of the memory plan (``grove config show``)."""

    def model_bytes(self) -> int: ...


PARAMETER_CAPABILITIES: tuple[type, ...] = (
    ScoresSeveralObjectives, WeighsObjectives, NeedsLargerGroups, NamesObjectives, MayProduceAdvantages,
    LoadsModelWeights,
)


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered component: its id, callable, parameter model, citation and documentation fields.

    ``paper``, ``summary``, ``formula`` and ``reference`` (the reference implementation whose numbers the
    component reproduces) are what ``scripts/docs_tables.py`` prints in ``docs/algorithms.md``. ``capabilities``:
    the :data:`PARAMETER_CAPABILITIES` its parameter model declares (ask with :meth:`declares`).
    """

    id: str
    fn: T
    params: type[BaseModel]
    paper: str
    summary: str
    requires: frozenset[Requires] = frozenset()
    formula: str = ""
    reference: str = ""
    zero_advantage_rows_skippable: bool = False
    capabilities: frozenset[type] = field(default_factory=frozenset)
    step_columns: frozenset[str] = frozenset()
    extra: str | None = None  # the pip extra its module's dependencies come with (None: the core's)

    def declares(self, capability: type) -> bool:
        """Whether the parameter model declares ``capability`` (one of :data:`PARAMETER_CAPABILITIES`)."""
        return capability in self.capabilities

    def needs(self, requirement: Requires) -> bool:
        """Whether the component declared ``requirement`` when it registered."""
        return requirement in self.requires


class UnknownComponentError(KeyError):
    """Raised when a registry id is not known; the message lists the known ids."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it readable
        return str(self.args[0])


class MissingExtraError(ValueError):
    """A declared component's module cannot be imported because its extra is not installed; the message names the
    component and the ``pip install 'grove[extra]'`` that brings it (a config check reports it as one ``error:``
    line naming the key, exit 2)."""


@dataclass(frozen=True)
class Declaration:
    """What a registry knows of a component whose module is imported only when a config uses it (an application
    or hub adapter with its own extra): its id, the module whose import registers it, the extra its dependencies
    come with, and its documentation fields (see :meth:`Registry.register`)."""

    id: str
    module: str
    extra: str
    needs: tuple[str, ...] = ()  # the top-level modules the extra installs (checked before the module is imported)
    install: str = ""  # the command that installs them, when not just pip install 'grove[extra]'
    summary: str = ""
    paper: str = ""
    requires: tuple[Requires, ...] = ()
    formula: str = ""
    reference: str = ""


class Registry(Generic[T]):
    """A named table of components of one kind (e.g. ``"policy loss"``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._declared: dict[str, Declaration] = {}

    def declare(
        self, id: str, *, module: str, extra: str, needs: tuple[str, ...] = (), install: str = "", summary: str = "",
        paper: str = "", requires: tuple[Requires, ...] = (), formula: str = "", reference: str = "",
    ) -> None:
        """Declare a component registered by ``module`` when it is imported (see :class:`Declaration`): listed with
        the other ids, imported by the first :meth:`entry`, :meth:`get` or :meth:`validate_params` of ``id``. The
        module's own :meth:`register` call may leave out what the declaration says (summary, paper, requires,
        formula, reference)."""
        if id in self._declared:
            raise ValueError(f"{self.kind} id {id!r} is already declared")
        declared = Declaration(id, module, extra, tuple(needs), install, summary, paper,
                               tuple(_requirements(self.kind, id, requires)), formula, reference)
        self._declared[id] = declared
        registered = self._entries.get(id)
        if registered is not None:  # its module was imported first (directly): the declaration documents it now
            if getattr(registered.fn, "__module__", module) != module:
                raise ValueError(f"{self.kind} id {id!r} is already registered by {registered.fn.__module__!r}")
            self._entries[id] = _documented(registered, declared)

    def _missing_extra(self, id: str, module: str) -> MissingExtraError:
        declared = self._declared[id]
        install = declared.install or f"pip install 'grove[{declared.extra}]'"
        return MissingExtraError(
            f"{self.kind} {id!r} needs the {declared.extra!r} extra, which is not installed (no module named "
            f"{module!r}): {install} (or 'grove[all]' for every application and hub adapter)"
        )

    def declaration(self, id: str) -> Declaration | None:
        """The declaration of ``id`` (``None``: a core component, or unknown)."""
        return self._declared.get(id)

    def extra_of(self, id: str) -> str | None:
        """The extra ``id``'s dependencies come with (``None``: the core's)."""
        declared = self._declared.get(id)
        return declared.extra if declared is not None else None

    def _import_declared(self, id: str) -> None:
        """Import the module that registers the declared ``id``; :class:`MissingExtraError` when a dependency of
        its extra is not installed."""
        import importlib

        declared = self._declared[id]
        absent = next((name for name in declared.needs if not importable(name)), None)
        if absent is not None:
            raise self._missing_extra(id, absent)
        try:
            importlib.import_module(declared.module)
        except ModuleNotFoundError as exc:
            missing = exc.name or str(exc)
            if missing.split(".")[0] == "grove":
                raise
            raise self._missing_extra(id, missing) from exc
        if id not in self._entries:
            raise RuntimeError(f"module {declared.module!r} did not register {self.kind} {id!r} it declares")

    def register(
        self,
        id: str,
        *,
        params: type[BaseModel] = NoParams,
        paper: str = "",
        summary: str = "",
        requires: tuple[Requires, ...] = (),
        formula: str = "",
        reference: str = "",
        zero_advantage_rows_skippable: bool = False,
        step_columns: tuple[str, ...] = (),
    ) -> Callable[[T], T]:
        """Decorator registering ``fn`` under ``id``. Ids are lowercase ``[a-z0-9_]`` and unique.

        ``requires``: the inputs the component needs beyond a plain rollout (:class:`Requires`); the pipeline
        provides them when the component is selected. ``formula`` (one line) and ``reference`` (the implementation whose
        numbers it matches) document the component in the generated tables.

        ``zero_advantage_rows_skippable`` (policy losses and loss aggregations): a sample whose advantages are all
        zero contributes nothing to the gradient and changes no other sample's term (the loss of a row depends on
        that row alone and vanishes with its advantages; the aggregation is a sum of per-row terms over global
        counts), so the update may leave such samples out of its forward and backward
        (``train.skip_zero_advantage``). Off unless declared: a component that couples rows (a covariance over the
        micro-batch, a per-micro-batch mean) must not set it.

        ``step_columns`` (step-level advantage estimators): the named columns of the step table it reads
        (:meth:`grove.batch.StepTable.column`), each produced by a registered step annotator (``STEP_ANNOTATORS``);
        the config refuses an estimator whose columns no annotator produces.
        """
        if not id or id != id.lower() or not id.replace("_", "").isalnum():
            raise ValueError(f"{self.kind} id {id!r} must be lowercase letters, digits and '_'")
        required = _requirements(self.kind, id, requires)

        def decorator(fn: T) -> T:
            if id in self._entries and self._entries[id].fn is not fn:
                raise ValueError(f"{self.kind} id {id!r} is already registered")
            doc = (fn.__doc__ or "").strip().splitlines()
            entry = Entry(
                id, fn, params, paper, summary or (doc[0] if doc else ""), required, formula, reference,
                zero_advantage_rows_skippable, frozenset(c for c in PARAMETER_CAPABILITIES if issubclass(params, c)),
                frozenset(step_columns),
            )
            declared = self._declared.get(id)
            self._entries[id] = entry if declared is None else _documented(entry, declared, explicit=summary)
            return fn

        return decorator

    def entry(self, id: str) -> Entry[T]:
        """The entry of ``id`` (a declared component's module is imported first: :class:`MissingExtraError` when its
        extra is not installed)."""
        if id not in self._entries:
            load_declarations()
        if id not in self._entries and id in self._declared:
            self._import_declared(id)
        try:
            return self._entries[id]
        except KeyError:
            raise UnknownComponentError(
                f"unknown {self.kind} {id!r}; known: {', '.join(self.ids()) or '(none)'}"
            ) from None

    def get(self, id: str) -> T:
        return self.entry(id).fn

    def ids(self) -> list[str]:
        """Every id, the declared ones included (none is imported)."""
        load_declarations()
        return sorted({*self._entries, *self._declared})

    def __contains__(self, id: object) -> bool:
        if id not in self._entries:
            load_declarations()
        return id in self._entries or id in self._declared

    def __iter__(self):
        """Every entry, importing the declared ones whose extras are installed (the others are left out)."""
        for id in self.ids():
            try:
                yield self.entry(id)
            except MissingExtraError:
                continue

    def validate_params(self, id: str, values: dict[str, Any]) -> BaseModel:
        """Validate ``values`` against the parameter model registered with ``id``."""
        return self.entry(id).params.model_validate(values)


# the packages outside the core whose folders declare components, and the tuple naming their folders
_DECLARING_PACKAGES = (("grove.hubs", "HUBS"), ("grove.wings", "WINGS"))
_declarations_loaded = False


def load_declarations() -> None:
    """Load every hub adapter's and application's ``<folder>_declarations`` module, once per process: light modules
    that declare their components (:meth:`Registry.declare`) without importing them. The registries call this
    before they answer a question about their ids, so code that reaches a registry without going through the
    command line or the config (``build_knowledge_base("tables")``) sees the declared components too."""
    global _declarations_loaded
    if _declarations_loaded:
        return
    _declarations_loaded = True
    import importlib

    for package, names in _DECLARING_PACKAGES:
        folders = getattr(importlib.import_module(package), names)
        for folder in folders:
            importlib.import_module(f"{package}.{folder}.{folder}_declarations")


def extra_installed(declared: Declaration) -> bool:
    """Whether every module ``declared``'s extra installs can be imported here (nothing is imported)."""
    return all(importable(name) for name in declared.needs)


def _documented(entry: Entry, declared: Declaration, explicit: str = "") -> Entry:
    """``entry`` with what its declaration says where the registration said nothing (and the declaration's extra);
    a registration's own docstring summary gives way to the declaration's."""
    import dataclasses

    return dataclasses.replace(
        entry, paper=entry.paper or declared.paper, summary=explicit or declared.summary or entry.summary,
        requires=entry.requires or frozenset(declared.requires), formula=entry.formula or declared.formula,
        reference=entry.reference or declared.reference, extra=declared.extra,
    )


ADVANTAGE_ESTIMATORS: Registry = Registry("advantage estimator")
POLICY_LOSSES: Registry = Registry("policy loss")
LOSS_AGGREGATIONS: Registry = Registry("loss aggregation")
KL_ESTIMATORS: Registry = Registry("KL estimator")
REWARD_FUNCTIONS: Registry = Registry("reward function")
REWARD_COMBINERS: Registry = Registry("reward combiner")
ENVIRONMENTS: Registry = Registry("environment")
ACTION_PARSERS: Registry = Registry("action parser")
EXPERIENCE_SOURCES: Registry = Registry("experience source")
KNOWLEDGE_BASES: Registry = Registry("knowledge base")
ROLLOUT_ENGINES: Registry = Registry("rollout engine")
STEP_ANNOTATORS: Registry = Registry("step annotator")


def import_callable(path: str, what: str, error: type[Exception] = ValueError) -> Callable[..., Any]:
    """The callable at ``"package.module:attr"`` (``attr`` may be dotted), for user components given by import
    path (rewards, environments), or the object a ``python:<name>`` reference names in this process
    (:mod:`grove.python_objects`). Failures raise ``error`` with a message naming ``what`` (e.g. ``"reward"``)
    and the path: malformed path, module not importable (with the working directory), module raising on
    import, missing attribute, not callable, a ``python:`` reference this process does not hold."""
    import importlib
    import os

    from grove.python_objects import is_python_reference, lookup

    if is_python_reference(path):
        return lookup(path, what, error)
    module_name, _, attr_path = path.partition(":")
    if not module_name or not attr_path:
        raise error(f"{what} import path {path!r} must look like 'package.module:function'")
    from grove.user_code import UserCodeExit, user_code

    try:
        with user_code(f"importing module {module_name!r} for {what} {path!r}"):
            module = importlib.import_module(module_name)
    except UserCodeExit as e:
        raise error(str(e)) from e
    except ModuleNotFoundError as e:
        if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise error(
                f"cannot import module {module_name!r} for {what} {path!r}: {e}. The module must be "
                f"importable (installed, or on PYTHONPATH; current directory: {os.getcwd()})"
            ) from e
        raise error(f"importing module {module_name!r} for {what} {path!r} failed: {e}") from e
    except Exception as e:
        raise error(f"importing module {module_name!r} for {what} {path!r} failed: {type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(f"module {module_name!r} has no attribute {attr_path!r} ({what} {path!r})") from None
    if not callable(obj):
        raise error(f"{what} {path!r} is not callable (got {type(obj).__name__})")
    return obj
