"""The plugin contract, versioned: what core calls on each kind of plugin, and what changed when.

A plugin distribution declares the contract it was written for in the module its entry point names
(``tackroom_contract = 3``); one that declares nothing predates versioning: contract 1. A declared contract
newer than :data:`CONTRACT_VERSION`, or older than a change to the plugin's kind, is refused with that change
and how to migrate; each class is checked when loaded: a method core calls that it overrides keeps today's
parameters and stays ``async`` where core awaits it. Each :data:`CHANGES` row is a CHANGELOG.md entry.
What a plugin declares besides methods is the contract too: CHANGELOG.md says per declaration whether one this
tackroom does not know is ignored with a warning or refuses the whole distribution (never half of it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

CONTRACT_VERSION = 3
"""The contract this tackroom speaks. Bumped by any change to a method in :data:`METHODS` or to a declaration's rule."""

CONTRACT_ATTRIBUTE = "tackroom_contract"
"""The module attribute (in the entry-point module) a plugin distribution declares its contract with."""

UNDECLARED_CONTRACT = 1
"""What a distribution that declares nothing was written for: the contract before versioning."""

CAPABILITIES_CLOSED = 3
"""The first contract whose plugins name only :class:`~tackroom.Capability` members (the list closed during contract
2): from a plugin declaring an older one (or a newer one than this tackroom's, refused as newer), a name not
listed is ignored with a warning instead of refused."""


@dataclass(frozen=True)
class Method:
    """A method core calls on a plugin class: its parameters after ``self`` and whether it is awaited."""

    kind: str
    owner: str
    name: str
    params: tuple[str, ...]
    is_async: bool = True

    def __str__(self) -> str:
        return f"{self.owner}.{self.name}({', '.join(self.params)})"


@dataclass(frozen=True)
class Change:
    """One contract change: the contract that introduced it, the method, before and after, how to migrate."""

    contract: int
    kind: str
    method: str
    before: str
    after: str
    migrate: str

    def describe(self) -> str:
        return f"contract {self.contract} changed {self.method}: {self.before} became {self.after} ({self.migrate})"


METHODS: dict[str, tuple[Method, ...]] = {
    "harness": (Method("harness", "Harness", "run", ("task", "sandbox", "policy")),
                Method("harness", "Harness", "setup", ("sandbox", "task")),
                Method("harness", "Harness", "mounts", ("task",))),
    "sandbox": (Method("sandbox", "SandboxProvider", "create", ("spec",), is_async=False),
                Method("sandbox", "SandboxProvider", "cleanup", ()),
                Method("sandbox", "Sandbox", "run_grader",
                       ("cmd", "private", "collect", "dest", "cwd", "env", "timeout", "graded"))),
    "verifier": (Method("verifier", "Verifier", "verify", ("task", "sandbox", "trajectory")),
                 Method("verifier", "Verifier", "prepare", ("task", "sandbox"))),
    "executor": (Method("executor", "Executor", "run", ("plan", "manager", "on_started")),),
}
"""Per kind, the methods core calls, with today's parameters (losses follow SkyRL's signature)."""

CHANGES: tuple[Change, ...] = (
    Change(2, "harness", "Harness.run", "run(instruction, sandbox, policy)", "run(task, sandbox, policy)",
           "take the Task first and read the prompt from task.instruction; config, paths and metadata are on "
           "the task too, so nothing needs keeping from setup()"),
    Change(3, "sandbox", "Sandbox.run_grader", "run_grader(cmd, *, private, collect, dest, cwd, env, timeout)",
           "run_grader(..., graded=())", "accept `graded`: while kept services run, test.sh reads each of those "
           "paths as a copy taken while they were frozen (docs/threat-model.md); a sandbox that keeps none ignores it"),
)
"""Every change since contract 1, oldest first (``CHANGELOG.md`` says the same for people)."""


BASE_MODULES = frozenset({"tackroom._plugin", "tackroom._harness", "tackroom._sandbox", "tackroom._verifier",
                          "tackroom._executor"})
"""Where the base classes live: a method inherited from them is today's contract by construction."""


def declared_contract_problem(kind: str, declared: int | None) -> str | None:
    """Why a plugin of ``kind`` declaring contract ``declared`` cannot run under this core, or ``None``."""
    contract = UNDECLARED_CONTRACT if declared is None else declared
    if not isinstance(contract, int) or isinstance(contract, bool) or contract < 1:
        return f"its {CONTRACT_ATTRIBUTE} = {declared!r} is not a contract version (an integer, today {CONTRACT_VERSION})"
    if contract > CONTRACT_VERSION:
        return (f"it was written for plugin contract {contract}, newer than this tackroom's {CONTRACT_VERSION}: "
                "upgrade tackroom")
    missed = [c for c in CHANGES if c.kind == kind and c.contract > contract]
    if not missed:
        return None
    said = "it declares no contract, so it" if declared is None else "it"
    return (f"{said} was written for plugin contract {contract}; since then "
            + "; ".join(c.describe() for c in missed)
            + f". Migrate it, then declare {CONTRACT_ATTRIBUTE} = {CONTRACT_VERSION} in its entry-point module "
              "(CHANGELOG.md lists every change)")


def _shape(params: list[inspect.Parameter]) -> tuple[list[str], bool]:
    names = [p.name.lstrip("_") for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return names, any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def signature_problem(cls: type, kind: str) -> str | None:
    """The first method ``cls`` overrides with another shape than today's contract, described, or ``None``.

    A method the class inherits from core's base is today's by construction. Parameter names are
    compared (a leading ``_`` is ignored): contract 1's ``run(instruction, …)`` and contract 2's
    ``run(task, …)`` take as many arguments, so only the names tell them apart.
    """
    for method in METHODS.get(kind, ()):
        impl = inspect.getattr_static(cls, method.name, None)
        owner = next((k for k in cls.__mro__ if method.name in vars(k)), None)
        if impl is None or owner is None or owner.__module__ in BASE_MODULES:
            continue
        func = impl.__func__ if isinstance(impl, (classmethod, staticmethod)) else impl
        if not callable(func):
            return f"{owner.__qualname__}.{method.name} is not a method; the contract calls {method}"
        try:
            params = list(inspect.signature(func).parameters.values())[1:]  # drop self
        except (TypeError, ValueError):
            continue
        names, star = _shape(params)
        found = f"{method.name}({', '.join(p.name for p in params)})"
        if names != list(method.params) and not (star and names == list(method.params)[:len(names)]):
            change = next((c for c in CHANGES if c.method == f"{method.owner}.{method.name}"), None)
            why = f"; {change.describe()}" if change else ""
            return f"{owner.__qualname__}.{found} does not match the contract's {method}{why}"
        if method.is_async != inspect.iscoroutinefunction(func):
            want = "an async def (core awaits it)" if method.is_async else "a plain def (core does not await it)"
            return f"{owner.__qualname__}.{method.name} must be {want}; the contract calls {method}"
    return None
