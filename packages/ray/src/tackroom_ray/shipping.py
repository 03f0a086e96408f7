"""What crosses the process boundary to a worker: plugins by reference, options as dicts.

Plugin instances may hold clients, locks or sockets, so they never travel.
A worker gets each plugin's name, its ``module:qualname`` and its options,
re-resolves the class through its own plugin manager (the installed
entry points, so a worker runs the same plugins the driver does) and builds
fresh instances there.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from tackroom import PluginKind, PluginNotFoundError, Policy, Task, Trial, import_ref
from tackroom.app import check_plugin_class
from tackroom_ray.errors import PluginNotShippableError

if TYPE_CHECKING:
    from tackroom import PluginManager, SandboxProvider
    from tackroom.app import TrialPlugins




class PluginRef(BaseModel):
    """A plugin class by name and ``module:qualname``, plus the options to build it with."""

    model_config = ConfigDict(frozen=True)

    kind: PluginKind
    name: str
    reference: str
    options: dict[str, Any]

    @classmethod
    def of(cls, plugin_cls: type, options: Any) -> PluginRef:
        """Describe ``plugin_cls`` built with ``options`` (its ``Options`` model or a dict).

        Raises :class:`PluginNotShippableError` when a worker could not import
        the class: it lives in ``__main__`` or inside a function.
        """
        reference = f"{plugin_cls.__module__}:{plugin_cls.__qualname__}"
        fix = ("define it at module level in an importable module (a package, or a file on the workers' "
               "PYTHONPATH via [runtime.ray] runtime_env), or install it as a plugin")
        if plugin_cls.__module__ == "__main__" or "<locals>" in plugin_cls.__qualname__:
            raise PluginNotShippableError(f"{plugin_cls.__qualname__} ({reference}) cannot be imported by a worker "
                                          f"process; {fix}")
        try:
            same = import_ref(reference) is plugin_cls
        except (ImportError, AttributeError):
            same = False
        if not same:
            raise PluginNotShippableError(f"{reference} does not import back to {plugin_cls.__qualname__}; {fix}")
        if isinstance(options, BaseModel):
            data = options.model_dump(by_alias=True, round_trip=True)
        else:
            data = dict(options or {})
        return cls(kind=plugin_cls.kind, name=plugin_cls.name, reference=reference, options=data)

    def load(self, manager: PluginManager) -> type:
        """The class, through the plugin manager when it knows this name at this reference, else by import."""
        try:
            entry = manager.entry(self.kind, self.name)
        except PluginNotFoundError:
            entry = None
        if entry is not None and entry.reference == self.reference:
            return entry.load()
        from tackroom.app import BASES

        return check_plugin_class(import_ref(self.reference), self.kind, BASES[self.kind])

    def build_options(self, cls: type) -> BaseModel:
        return cls.Options.model_validate(self.options)

    @property
    def key(self) -> str:
        """Identity of (class, options), for caching built instances in a worker."""
        return f"{self.reference}|{json.dumps(self.options, sort_keys=True, default=repr)}"


class AttemptPayload(BaseModel):
    """Everything a worker needs to run one attempt; small, and picklable by reference."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    trial: Trial
    task: Task
    harness: PluginRef
    sandbox: PluginRef
    verifier: PluginRef
    policy: Policy | None = None
    attempt: int
    setup_timeout_sec: float
    teardown_timeout_sec: float


class ShippedPlugins(BaseModel):
    """A :class:`~tackroom._runtime.TrialPlugins` as references (``policy_for`` stays with the driver)."""

    harness: PluginRef
    sandbox: PluginRef
    verifier: PluginRef

    @classmethod
    def of(cls, plugins: TrialPlugins) -> ShippedPlugins:
        return cls(
            harness=PluginRef.of(plugins.harness_cls, plugins.harness_options),
            sandbox=PluginRef.of(type(plugins.sandbox), plugins.sandbox.options),
            verifier=PluginRef.of(plugins.verifier_cls, plugins.verifier_options),
        )


# -- the worker side ----------------------------------------------------------------------
_providers: dict[str, SandboxProvider] = {}
"""Sandbox providers built in this worker process, reused by later attempts (they may hold clients)."""


async def run_payload(payload: AttemptPayload) -> dict[str, Any]:
    """Run one shipped attempt in this process; returns ``{"result": ..., "trajectory": ...}`` as JSON data.

    Lifecycle hooks are left to the driver, which fires them around the
    attempt; error classification runs here, where the exception is.
    """
    from tackroom import get_plugin_manager
    from tackroom.app import TrialPlugins, TrialRuntime

    class WorkerRuntime(TrialRuntime):
        def _notify(self, hook: str, **kwargs: Any) -> None:
            """The driver fires lifecycle hooks; firing them here too would report every attempt twice."""

    manager = get_plugin_manager()
    harness_cls = payload.harness.load(manager)
    verifier_cls = payload.verifier.load(manager)
    provider = _providers.get(payload.sandbox.key)
    if provider is None:
        sandbox_cls = payload.sandbox.load(manager)
        provider = _providers[payload.sandbox.key] = sandbox_cls(payload.sandbox.build_options(sandbox_cls))
    plugins = TrialPlugins(harness_cls, payload.harness.build_options(harness_cls), provider,
                           verifier_cls, payload.verifier.build_options(verifier_cls))
    runtime = WorkerRuntime(".", setup_timeout_sec=payload.setup_timeout_sec,
                            teardown_timeout_sec=payload.teardown_timeout_sec, manager=manager, progress=False)
    result, trajectory = await runtime.run_attempt(payload.trial, payload.task, plugins, payload.attempt,
                                                   policy=payload.policy)
    return {"result": result.dump(), "trajectory": trajectory.model_dump(mode="json")}
