"""The object handed to registration hooks, and what it records: one :class:`PluginEntry` per plugin, every kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tackroom._capability import Capability, capabilities_of
from tackroom._contract import CONTRACT_VERSION, UNDECLARED_CONTRACT, declared_contract_problem, signature_problem
from tackroom._errors import PluginConflictError, PluginDefinitionError, PluginIncompatibleError
from tackroom._import_ref import import_ref
from tackroom._loss import LossSpec
from tackroom._plugin import (
    KIND_BASES,
    NoOptions,
    Plugin,
    PluginKind,
    PluginSpec,
    check_plugin_class,
)


@dataclass
class PluginEntry:
    """One registered plugin of any kind: where it came from, what it declares, and how to get it."""

    kind: PluginKind
    name: str
    distribution: str
    version: str
    summary: str
    capabilities: frozenset[Capability]
    reference: str
    """``module:qualname`` of the class or loss function."""
    options: type[BaseModel] | None = None
    """Its ``Options`` model when known without importing it (a class, a loss, an executor's spec)."""
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

        Raises :class:`PluginIncompatibleError` when it was written for another plugin contract, and
        :class:`PluginDefinitionError` when the class is not what was registered.
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
            cls = check_plugin_class(obj, self.kind, self.contract)
            self._check_declared(cls)
            self.problem = signature_problem(cls, self.kind)
            if self.problem is not None:
                raise self.refusal()
            self._target = cls
        return self._target

    def _check_declared(self, cls: type[Plugin]) -> None:
        """The imported class says what the registration said (name; capabilities and options when given)."""
        base = KIND_BASES[self.kind]
        article = "an" if base[0] in "AEIOU" else "a"
        if cls.name != self.name:
            raise PluginDefinitionError(
                f"{self.reference} was registered as {self.name!r} but its class says name = {cls.name!r}: not "
                f"{article} {base} subclass with that name")
        if self.capabilities and cls.capabilities != self.capabilities:
            raise PluginDefinitionError(
                f"{self.reference} was registered with capabilities {sorted(map(str, self.capabilities))} but its "
                f"class says {sorted(map(str, cls.capabilities))}: declare them once, in a PluginSpec the class "
                "takes with spec=")
        if self.options is not None and cls.Options is not self.options:
            raise PluginDefinitionError(f"{self.reference}.Options is not {self.options.__qualname__}, the options "
                                        f"model the {self.kind} {self.name!r} was registered with")

    def as_dict(self) -> dict[str, Any]:
        """The row ``tackroom plugins --json`` shows."""
        return {
            "name": self.name,
            "kind": self.kind,
            "distribution": self.distribution,
            "version": self.version,
            "summary": self.summary,
            "capabilities": sorted(self.capabilities),
            "reference": self.reference,
            "contract": UNDECLARED_CONTRACT if self.contract is None else self.contract,
            "usable": self.problem is None,
            "problem": self.problem,
        }


class Registrar:
    """Collects what plugins register; conflicts are caught here, in one place. The plugin manager sets
    :attr:`source` (distribution, version) and :attr:`contract` before each plugin's hook implementation runs."""

    def __init__(self) -> None:
        self.entries: dict[tuple[PluginKind, str], PluginEntry] = {}
        self.source: tuple[str, str] = ("<unknown>", "")
        self.contract: int | None = CONTRACT_VERSION
        """The contract the plugin being registered declares (set by the manager, like :attr:`source`)."""

    @property
    def executors(self) -> dict[str, PluginEntry]:
        """The registered executors by name."""
        return {name: e for (kind, name), e in self.entries.items() if kind == "executor"}

    # -- what plugins call: one method per registration hook (see _add for the shorthand) ------
    def add_harness(self, plugin: type[Plugin] | PluginSpec | str, **shorthand: Any) -> None:
        """Register a :class:`~tackroom.Harness` subclass or a :class:`~tackroom.PluginSpec` naming one."""
        self._add("harness", plugin, **shorthand)

    def add_sandbox(self, plugin: type[Plugin] | PluginSpec | str, **shorthand: Any) -> None:
        """Register a :class:`~tackroom.SandboxProvider` subclass or a :class:`~tackroom.PluginSpec` naming one."""
        self._add("sandbox", plugin, **shorthand)

    def add_verifier(self, plugin: type[Plugin] | PluginSpec | str, **shorthand: Any) -> None:
        """Register a :class:`~tackroom.Verifier` subclass or a :class:`~tackroom.PluginSpec` naming one."""
        self._add("verifier", plugin, **shorthand)

    def add_executor(self, plugin: type[Plugin] | PluginSpec | str, **shorthand: Any) -> None:
        """Register an :class:`~tackroom.executors.Executor` subclass or a :class:`~tackroom.PluginSpec` naming
        one; the spec carries ``options``, the model of its ``[runtime.<name>]`` table (default: none)."""
        self._add("executor", plugin, **shorthand)

    def add_loss(self, spec: LossSpec) -> None:
        """Register a :class:`~tackroom.LossSpec` (its ``fn`` may be a lazy ``"module:function"``)."""
        self._add("loss", spec)

    def _add(self, kind: PluginKind, plugin: Any, *, name: str | None = None, summary: str = "",
            capabilities: frozenset[str] | set[str] = frozenset(), options: type[BaseModel] | None = None) -> None:
        """Register a plugin of ``kind``: a class, a :class:`~tackroom.PluginSpec`, or a bare ``"module:Class"`` with
        ``name=`` (``summary=``, ``capabilities=``, ``options=``), the shorthand for a spec kept for older plugins."""
        if isinstance(plugin, str):
            if name is None:
                raise PluginDefinitionError(f"lazy {kind} reference {plugin!r} needs name= (the class is not "
                                            "imported yet); better, declare a tackroom.PluginSpec the class takes")
            plugin = PluginSpec(kind, name, plugin, summary, capabilities_of(kind, capabilities, plugin, self.contract),
                                options)
        elif name is not None or summary or capabilities or options is not None:
            raise PluginDefinitionError(f"{getattr(plugin, '__qualname__', plugin)!r}: name=, summary=, "
                                        "capabilities= and options= go with a lazy reference; a class or a spec "
                                        "declares its own")
        self._store(self._entry(kind, plugin))

    # -- internals ---------------------------------------------------------------------------
    def _entry(self, kind: PluginKind, plugin: Any) -> PluginEntry:
        if kind == "loss":
            if not isinstance(plugin, LossSpec):
                raise PluginDefinitionError(f"add_loss expects a LossSpec, got {type(plugin).__name__}")
            ref = plugin.fn if isinstance(plugin.fn, str) else f"{plugin.fn.__module__}:{plugin.fn.__qualname__}"
            return PluginEntry(kind, plugin.name, *self.source, plugin.summary, plugin.capabilities, ref,
                               plugin.Options, plugin)
        if isinstance(plugin, PluginSpec):
            if plugin.kind != kind:
                raise PluginDefinitionError(f"the {plugin.kind} spec {plugin.name!r} is registered as a {kind}")
            # An executor's options validate [runtime.<name>] before the class is imported: none said, none taken.
            options = plugin.options or (NoOptions if kind == "executor" else None)
            return PluginEntry(kind, plugin.name, *self.source, plugin.summary, plugin.capabilities,
                               plugin.reference, options)
        cls = check_plugin_class(plugin, kind, self.contract)
        return PluginEntry(kind, cls.name, *self.source, cls.summary(), capabilities_of(kind, cls.capabilities, ""),
                           f"{cls.__module__}:{cls.__qualname__}", cls.Options, cls)

    def _store(self, entry: PluginEntry) -> None:
        entry.contract = self.contract
        entry.problem = declared_contract_problem(entry.kind, self.contract)
        if entry.problem is None and entry.kind != "loss" and entry._target is not None:
            entry.problem = signature_problem(entry._target, entry.kind)
        existing = self.entries.get((entry.kind, entry.name))
        if existing is not None:
            raise PluginConflictError(
                f"two plugins register the {entry.kind} {entry.name!r}: {existing.distribution} "
                f"({existing.reference}) and {entry.distribution} ({entry.reference}). Uninstall one, "
                f"or block one with TACKROOM_BLOCK_PLUGINS=<entry-point name>"
            )
        self.entries[(entry.kind, entry.name)] = entry
