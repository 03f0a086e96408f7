"""Finding plugins: entry points in the group ``tackroom``, filtered, registered, resolved by name.

Environment variables (read when the manager is created):

``TACKROOM_LOAD_PLUGINS``   comma-separated allowlist of entry-point or distribution names to load
                            besides core's built-ins; set but empty loads no third-party plugin.
``TACKROOM_BLOCK_PLUGINS``  comma-separated blocklist (entry-point or distribution names); applies
                            to built-ins too.
``TACKROOM_TRACE_PLUGINS``  set and not empty: every hook call is printed to stderr with the hook's name,
                            the plugins called, a summary of the arguments and how long it took.
"""

from __future__ import annotations

import difflib
import logging
import os
import reprlib
import sys
import time
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from tackroom import _hookspecs as hookspecs
from tackroom._contract import CONTRACT_ATTRIBUTE, CONTRACT_VERSION
from tackroom._errors import PluginDefinitionError, PluginNotFoundError
from tackroom._markers import PROJECT_NAME
from tackroom._plugin import PluginKind
from tackroom._registrar import PluginEntry, Registrar

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "tackroom"
CORE_DISTRIBUTION = "tackroom"
LOAD_ENV = "TACKROOM_LOAD_PLUGINS"
BLOCK_ENV = "TACKROOM_BLOCK_PLUGINS"
TRACE_ENV = "TACKROOM_TRACE_PLUGINS"

REGISTRATION_HOOKS: dict[PluginKind, str] = {
    "harness": "tackroom_harnesses",
    "sandbox": "tackroom_sandboxes",
    "verifier": "tackroom_verifiers",
    "loss": "tackroom_losses",
    "executor": "tackroom_executors",
}
"""The hook each kind is registered through (``tackroom_`` + the kind's plural); each is a :class:`PluginEntry`."""


def _names(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {n.strip() for n in value.split(",") if n.strip()}


class PluginManager:
    """Loads plugins and answers "which harness/sandbox/verifier/loss/executor is called X?"."""

    def __init__(self, *, load_entry_points: bool = True, env: dict[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.allow = _names(env.get(LOAD_ENV))
        self.block = _names(env.get(BLOCK_ENV)) or set()
        self._sources: dict[int, tuple[str, str]] = {}
        self._contracts: dict[int, int | None] = {}
        self._installed: set[int] = set()
        """Plugins that came from entry points: a registrar of theirs that raises is reported, not fatal."""
        self.skipped: list[str] = []
        self.broken: list[str] = []
        """Entry points whose module failed to import (reported, not fatal)."""
        self.refused: set[str] = set()  # distributions refused whole (one broke a rule): nothing they register is kept
        self.trace = bool(env.get(TRACE_ENV))
        self._started: list[float] = []  # when each hook call in progress began (pluggy's calls nest, never overlap)
        if self.trace:
            self.pm.add_hookcall_monitoring(self._call_started, self._call_finished)
        self._registrar: Registrar | None = None
        if load_entry_points:
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                self._load_entry_point(ep)

    # -- loading --------------------------------------------------------------------
    def _load_entry_point(self, ep: EntryPoint) -> None:
        dist = ep.dist.name if ep.dist is not None else "<unknown>"
        version = ep.dist.version if ep.dist is not None else ""
        names = {ep.name, dist}
        if names & self.block:
            self.skipped.append(f"{dist}:{ep.name} (blocked by {BLOCK_ENV})")
            return
        if self.allow is not None and dist != CORE_DISTRIBUTION and not names & self.allow:
            self.skipped.append(f"{dist}:{ep.name} (not in {LOAD_ENV})")
            return
        if self.pm.get_plugin(f"{dist}:{ep.name}") is not None:
            return  # the same distribution seen twice on sys.path
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken third-party plugin must not take every command down
            message = f"{dist}:{ep.name} failed to import ({ep.value}): {type(exc).__name__}: {exc}"
            self.broken.append(message)
            self.refused.add(dist)
            log.warning("tackroom plugin %s; nothing %s registers is kept", message, dist)
            return
        # Core's built-ins are written for core's own contract; a distribution that declares none predates
        # versioning (contract 1).
        contract = CONTRACT_VERSION if dist == CORE_DISTRIBUTION else getattr(plugin, CONTRACT_ATTRIBUTE, None)
        try:
            self.register(plugin, name=f"{dist}:{ep.name}", distribution=dist, version=version, contract=contract)
        except PluginDefinitionError as exc:
            self.broken.append(str(exc))
            self.refused.add(dist)
            log.warning("tackroom plugin %s; nothing %s registers is kept", exc, dist)
            return
        self._installed.add(id(plugin))

    def register(self, plugin: Any, *, name: str | None = None, distribution: str = "<local>",
                 version: str = "", contract: int | None = CONTRACT_VERSION) -> None:
        """Register a plugin object directly (tests, notebooks); same rules as entry points.

        ``contract`` (default: this tackroom's) is what it was written for; a ``tackroom_contract`` attribute on
        the plugin wins. A ``@hookimpl`` named for no tackroom hook raises :class:`PluginDefinitionError`.
        """
        self.pm.register(plugin, name=name)
        unknown = sorted(
            caller.name for caller in self.pm.get_hookcallers(plugin) or []
            if not caller.has_spec() and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
        )
        if unknown:
            self.pm.unregister(plugin)
            known = sorted(n for n in dir(hookspecs) if n.startswith("tackroom_"))
            hints = [f"{n} (did you mean {', '.join(close)}?)" if (close := difflib.get_close_matches(n, known, 2))
                     else n for n in unknown]
            raise PluginDefinitionError(f"plugin {name or plugin!r} implements hooks that do not exist: "
                                        f"{'; '.join(hints)}. tackroom's hooks: {', '.join(known)}")
        self._sources[id(plugin)] = (distribution, version)
        self._contracts[id(plugin)] = getattr(plugin, CONTRACT_ATTRIBUTE, contract)
        self._registrar = None

    # -- registry -------------------------------------------------------------------
    @property
    def registrar(self) -> Registrar:
        """Call every registration hook once, implementation by implementation."""
        if self._registrar is None:
            registrar = Registrar()
            for hook_name in REGISTRATION_HOOKS.values():
                hook = getattr(self.pm.hook, hook_name)
                for impl in hook.get_hookimpls():  # registration order
                    registrar.source = self._sources.get(id(impl.plugin), ("<local>", ""))
                    registrar.contract = self._contracts.get(id(impl.plugin), CONTRACT_VERSION)
                    if registrar.source[0] in self.refused:
                        continue
                    self._call_started(hook_name, [impl], {})  # called one by one: pluggy's monitor sees none
                    self._call_registration(registrar, hook_name, impl)
                    self._call_finished(None, hook_name, [impl], {"register": registrar})
            for key in [key for key, entry in registrar.entries.items() if entry.distribution in self.refused]:
                del registrar.entries[key]
            registrar.source = ("<unknown>", "")
            self._registrar = registrar
        return self._registrar

    def _call_registration(self, registrar: Registrar, hook_name: str, impl: Any) -> None:
        """One plugin's registration hook. An installed plugin that breaks the rules there is reported in
        :attr:`broken` and its distribution :attr:`refused`; one registered in-process raises (its author is here)."""
        if id(impl.plugin) not in self._installed:
            impl.function(register=registrar)
            return
        before = set(registrar.entries)
        try:
            impl.function(register=registrar)
        except (PluginDefinitionError, ValueError) as exc:  # a spec's pydantic ValidationError is a ValueError
            for key in set(registrar.entries) - before:
                del registrar.entries[key]
            self.refused.add(registrar.source[0])
            message = f"{impl.plugin_name} failed in {hook_name}: {exc}"
            if message not in self.broken:
                self.broken.append(message)
            log.warning("tackroom plugin %s; nothing %s registers is kept", message, registrar.source[0])

    def entries(self, kind: PluginKind | None = None) -> list[PluginEntry]:
        """Registered plugins, sorted by kind then name."""
        return sorted(
            (e for e in self.registrar.entries.values() if kind is None or e.kind == kind),
            key=lambda e: (e.kind, e.name),
        )

    def entry(self, kind: PluginKind, name: str) -> PluginEntry:
        """The entry for ``name``; a :class:`PluginNotFoundError` listing what exists otherwise."""
        found = self.registrar.entries.get((kind, name))
        if found is not None:
            return found
        installed = ", ".join(e.name for e in self.entries(kind)) or "(none)"
        message = f"no {kind} named {name!r} is installed; installed {REGISTRATION_HOOKS[kind].removeprefix('tackroom_')}: {installed}"
        from tackroom._catalogue import load_catalogue

        known = next((c for c in load_catalogue() if c.kind == kind and c.name == name), None)
        if known is not None:
            message += f". {name!r} is provided by {known.distribution}: {known.install_hint}"
        raise PluginNotFoundError(message + self.not_loaded())

    def not_loaded(self) -> str:
        """What a "not installed" message adds: the plugins skipped, and those that failed to import."""
        message = f". Skipped plugins: {', '.join(self.skipped)}" if self.skipped else ""
        if self.broken:
            message += f". Plugins that failed to import: {'; '.join(self.broken)}"
        return message

    def get(self, kind: PluginKind, name: str) -> Any:
        """The plugin class (or :class:`~tackroom.LossSpec` for losses) called ``name``."""
        return self.entry(kind, name).load()

    def _call_started(self, hook_name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
        self._started.append(time.perf_counter())

    def _call_finished(self, outcome: Any, hook_name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
        """With ``TACKROOM_TRACE_PLUGINS`` set, a line on stderr per hook call (datasette's DATASETTE_TRACE_PLUGINS)."""
        took = (time.perf_counter() - self._started.pop()) * 1000
        if self.trace:
            args = ", ".join(f"{name}={reprlib.repr(value)}" for name, value in kwargs.items())
            plugins = ", ".join(impl.plugin_name for impl in impls)
            print(f"tackroom hook {hook_name}({args}) -> {plugins or 'no plugin'}: {took:.1f} ms", file=sys.stderr)

    @property
    def hook(self) -> Any:
        """pluggy's hook relay, for the lifecycle hooks."""
        return self.pm.hook


_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide manager (created on first use)."""
    global _manager
    if _manager is None:
        _manager = PluginManager()
    return _manager


def reset_plugin_manager() -> None:
    """Forget the process-wide manager (tests; after installing a plugin in-process)."""
    global _manager
    _manager = None
