"""The object handed to registration hooks, and what it records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tackroom._contract import CONTRACT_VERSION, UNDECLARED_CONTRACT, declared_contract_problem, signature_problem
from tackroom._errors import PluginConflictError, PluginDefinitionError, PluginIncompatibleError
from tackroom._harness import Harness
from tackroom._import_ref import import_ref
from tackroom._loss import LossSpec
from tackroom._plugin import PLUGIN_KINDS, Plugin, PluginKind, check_name, check_plugin_class, first_line
from tackroom._sandbox import SandboxProvider
from tackroom._verifier import Verifier
from tackroom.executors.base import Executor, NoOptions

BASES: dict[PluginKind, type] = {"harness": Harness, "sandbox": SandboxProvider, "verifier": Verifier}


@dataclass
class PluginEntry:
    """One registered plugin: where it came from, and how to get it."""

    kind: PluginKind
    name: str
    distribution: str
    version: str
    summary: str
    capabilities: frozenset[str]
    reference: str
    """``module:qualname`` of the class or loss function."""
    _target: Any = field(default=None, repr=False)
    contract: int | None = CONTRACT_VERSION
    """The plugin contract its distribution declares (``None``: declares none, so contract 1)."""
    problem: str | None = None
    """Why it cannot run under this core's contract (``None``: usable, as far as checked)."""

    @property
    def loaded(self) -> bool:
        return self._target is not None

    @property
    def usable(self) -> bool:
        return self.problem is None

    def refusal(self) -> PluginIncompatibleError:
        return PluginIncompatibleError(
            f"{self.kind} {self.name!r} from {self.distribution} {self.version} cannot run with this tackroom "
            f"(plugin contract {CONTRACT_VERSION}): {self.problem}".replace("  ", " "))

    def load(self) -> Any:
        """The plugin class (or :class:`LossSpec`), importing a lazy reference now.

        Raises :class:`PluginIncompatibleError` when it was written for another plugin contract.
        """
        if self.problem is not None:
            raise self.refusal()
        if self._target is None:
            try:
                obj = import_ref(self.reference)
            except ImportError as exc:
                raise PluginDefinitionError(
                    f"{self.kind} {self.name!r} from {self.distribution} could not be imported "
                    f"({self.reference}): {exc}. Is the distribution installed with its dependencies?"
                ) from exc
            cls = check_plugin_class(obj, self.kind, BASES[self.kind])
            if cls.name != self.name:
                raise PluginDefinitionError(
                    f"{self.reference} was registered as {self.name!r} but its class says name = {cls.name!r}"
                )
            self.problem = signature_problem(cls, self.kind)
            if self.problem is not None:
                raise self.refusal()
            self._target = cls
        return self._target

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "distribution": self.distribution,
            "version": self.version,
            "summary": self.summary,
            "capabilities": sorted(self.capabilities),
            "reference": self.reference,
            **contract_fields(self.contract, self.problem),
        }


def contract_fields(contract: int | None, problem: str | None) -> dict[str, Any]:
    """The columns ``tackroom plugins`` adds for the contract: declared version, usable, why not."""
    return {"contract": UNDECLARED_CONTRACT if contract is None else contract, "usable": problem is None,
            "problem": problem}


@dataclass
class ExecutorEntry:
    """One registered executor: its name, origin, options model (``[runtime.<name>]``) and class."""

    name: str
    distribution: str
    version: str
    summary: str
    reference: str
    """``module:qualname`` of the :class:`~tackroom.executors.Executor` subclass."""
    options: type[BaseModel]
    _target: type[Executor] | None = field(default=None, repr=False)
    contract: int | None = CONTRACT_VERSION
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The row ``tackroom plugins`` shows (kind ``executor``; options are ``[runtime.<name>]``)."""
        return {"name": self.name, "kind": "executor", "distribution": self.distribution, "version": self.version,
                "summary": self.summary, "capabilities": [], "reference": self.reference,
                **contract_fields(self.contract, self.problem)}

    def refusal(self) -> PluginIncompatibleError:
        return PluginIncompatibleError(
            f"executor {self.name!r} from {self.distribution} {self.version} cannot run with this tackroom "
            f"(plugin contract {CONTRACT_VERSION}): {self.problem}".replace("  ", " "))

    def load(self) -> type[Executor]:
        """The executor class, importing a lazy reference now (:class:`PluginIncompatibleError`: another contract)."""
        if self.problem is not None:
            raise self.refusal()
        if self._target is None:
            try:
                cls = import_ref(self.reference)
            except ImportError as exc:
                raise PluginDefinitionError(
                    f"executor {self.name!r} from {self.distribution} could not be imported ({self.reference}): "
                    f"{exc}. Is the distribution installed with its dependencies?") from exc
            if not (isinstance(cls, type) and issubclass(cls, Executor)) or cls.name != self.name:
                raise PluginDefinitionError(f"{self.reference} is registered as the executor {self.name!r} but is "
                                            "not an Executor subclass with that name")
            if cls.Options is not self.options:
                raise PluginDefinitionError(f"{self.reference}.Options is not {self.options.__qualname__}, the "
                                            f"options model the executor {self.name!r} was registered with")
            self.problem = signature_problem(cls, "executor")
            if self.problem is not None:
                raise self.refusal()
            self._target = cls
        return self._target


class Registrar:
    """Collects what plugins register; conflicts are caught here, in one place.

    The plugin manager sets :attr:`source` (distribution, version) before it
    calls each plugin's hook implementation, so every entry knows its origin.
    """

    def __init__(self) -> None:
        self.entries: dict[tuple[PluginKind, str], PluginEntry] = {}
        self.executors: dict[str, ExecutorEntry] = {}
        self.source: tuple[str, str] = ("<unknown>", "")
        self.contract: int | None = CONTRACT_VERSION
        """The contract the plugin being registered declares (set by the manager, like :attr:`source`)."""

    # -- public API used by plugins -------------------------------------------------
    def add_harness(self, cls: type[Harness] | str, *, name: str | None = None, summary: str = "",
                    capabilities: frozenset[str] | set[str] = frozenset()) -> None:
        """Register a :class:`Harness` subclass, or a lazy ``"module:Class"`` reference (then ``name`` is required)."""
        self._add_class("harness", cls, name, summary, capabilities)

    def add_sandbox(self, cls: type[SandboxProvider] | str, *, name: str | None = None, summary: str = "",
                    capabilities: frozenset[str] | set[str] = frozenset()) -> None:
        """Register a :class:`SandboxProvider` subclass, or a lazy ``"module:Class"`` reference."""
        self._add_class("sandbox", cls, name, summary, capabilities)

    def add_verifier(self, cls: type[Verifier] | str, *, name: str | None = None, summary: str = "",
                     capabilities: frozenset[str] | set[str] = frozenset()) -> None:
        """Register a :class:`Verifier` subclass, or a lazy ``"module:Class"`` reference."""
        self._add_class("verifier", cls, name, summary, capabilities)

    def add_loss(self, spec: LossSpec) -> None:
        """Register a :class:`LossSpec` (its ``fn`` may be a lazy ``"module:function"``)."""
        if not isinstance(spec, LossSpec):
            raise PluginDefinitionError(f"add_loss expects a LossSpec, got {type(spec).__name__}")
        ref = spec.fn if isinstance(spec.fn, str) else f"{spec.fn.__module__}:{spec.fn.__qualname__}"
        entry = PluginEntry("loss", spec.name, *self.source, spec.summary, spec.capabilities, ref, spec)
        self._store(entry)

    def add_executor(self, cls: type[Executor] | str, *, name: str | None = None,
                     options: type[BaseModel] | None = None, summary: str = "") -> None:
        """Register an :class:`~tackroom.executors.Executor` subclass, or a lazy ``"module:Class"`` reference.

        A lazy reference needs ``name`` and ``options``, the pydantic model of
        its ``[runtime.<name>]`` table (config validation uses it without
        importing the class; default: no options).
        """
        if isinstance(cls, str):
            if ":" not in cls or name is None:
                raise PluginDefinitionError(f"lazy executor reference {cls!r} must look like 'package.module:Class' "
                                            "and come with name=")
            entry = ExecutorEntry(check_name(name, cls), *self.source, summary, cls, options or NoOptions)
        else:
            if not (isinstance(cls, type) and issubclass(cls, Executor)):
                raise PluginDefinitionError(f"{cls!r} is registered as an executor but is not an Executor subclass")
            cls_name = check_name(getattr(cls, "name", None), cls.__qualname__)
            if name not in (None, cls_name) or options not in (None, cls.Options):
                raise PluginDefinitionError(f"{cls.__qualname__}: name= and options= must match its class attributes")
            entry = ExecutorEntry(cls_name, *self.source, summary or first_line(cls.__doc__),
                                  f"{cls.__module__}:{cls.__qualname__}", cls.Options, cls)
        if not (isinstance(entry.options, type) and issubclass(entry.options, BaseModel)
                and entry.options.model_config.get("extra") == "forbid"):
            raise PluginDefinitionError(f"executor {entry.name!r}: its options must be a pydantic model that "
                                        "forbids unknown fields (model_config = ConfigDict(extra='forbid'))")
        entry.contract = self.contract
        entry.problem = declared_contract_problem("executor", self.contract) or (
            signature_problem(entry._target, "executor") if entry._target is not None else None)
        existing = self.executors.get(entry.name)
        if existing is not None:
            raise PluginConflictError(
                f"two plugins register the executor {entry.name!r}: {existing.distribution} ({existing.reference}) "
                f"and {entry.distribution} ({entry.reference}). Uninstall one, or block one with "
                "TACKROOM_BLOCK_PLUGINS=<entry-point name>")
        self.executors[entry.name] = entry

    # -- internals ------------------------------------------------------------------
    def _add_class(self, kind: PluginKind, cls: type[Plugin] | str, name: str | None, summary: str,
                   capabilities: frozenset[str] | set[str]) -> None:
        if isinstance(cls, str):
            if ":" not in cls:
                raise PluginDefinitionError(f"lazy {kind} reference {cls!r} must look like 'package.module:Class'")
            if name is None:
                raise PluginDefinitionError(f"lazy {kind} reference {cls!r} needs name= (the class is not imported yet)")
            check_name(name, cls)
            entry = PluginEntry(kind, name, *self.source, summary, frozenset(capabilities), cls)
        else:
            checked = check_plugin_class(cls, kind, BASES[kind])
            if name is not None and name != checked.name:
                raise PluginDefinitionError(f"{checked.__qualname__}: name= {name!r} differs from its class name {checked.name!r}")
            entry = PluginEntry(
                kind,
                checked.name,
                *self.source,
                summary or checked.summary(),
                checked.capabilities | frozenset(capabilities),
                f"{checked.__module__}:{checked.__qualname__}",
                checked,
            )
        self._store(entry)

    def _store(self, entry: PluginEntry) -> None:
        assert entry.kind in PLUGIN_KINDS
        entry.contract = self.contract
        entry.problem = declared_contract_problem(entry.kind, self.contract)
        if entry.problem is None and entry.kind != "loss" and entry._target is not None:
            entry.problem = signature_problem(entry._target, entry.kind)
        key = (entry.kind, entry.name)
        existing = self.entries.get(key)
        if existing is not None:
            raise PluginConflictError(
                f"two plugins register the {entry.kind} {entry.name!r}: {existing.distribution} "
                f"({existing.reference}) and {entry.distribution} ({entry.reference}). Uninstall one, "
                f"or block one with TACKROOM_BLOCK_PLUGINS=<entry-point name>"
            )
        self.entries[key] = entry
