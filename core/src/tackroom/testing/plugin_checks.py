"""Checks that apply to every plugin kind: registration, options model, naming rules."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from tackroom._errors import PluginDefinitionError
from tackroom._loss import AGGREGATIONS, LossSpec
from tackroom._manager import PluginManager
from tackroom._plugin import NAME_PATTERN, PLUGIN_KINDS, Plugin, PluginKind, check_plugin_class


def check_plugin(cls: type[Plugin]) -> None:
    """A plugin class has a valid name, a strict ``Options`` model, known capabilities and a docstring."""
    kind: PluginKind | None = getattr(cls, "kind", None)
    assert kind in PLUGIN_KINDS, f"{cls!r} has no plugin kind; subclass Harness, SandboxProvider, Verifier or Executor"
    try:
        check_plugin_class(cls, kind)
    except PluginDefinitionError as exc:
        raise AssertionError(str(exc)) from exc
    assert cls.summary(), f"{cls.__qualname__} needs a docstring; its first line is the summary `tackroom plugins` shows"
    _check_options(cls.Options, cls.__qualname__)
    if all(not f.is_required() for f in cls.Options.model_fields.values()):
        instance = cls()
        assert isinstance(instance.options, cls.Options)


def _check_options(options: type[BaseModel], where: str) -> None:
    try:
        options.model_validate({"__not_an_option__": 1})
    except ValidationError as exc:
        assert any(e["type"] == "extra_forbidden" for e in exc.errors()), (
            f"{where}.Options accepted an unknown field; it must forbid extras so typos are caught"
        )
    else:
        raise AssertionError(f"{where}.Options accepted an unknown field; it must forbid extras")


def check_loss_spec(spec: LossSpec, *, load: bool = True) -> None:
    """A loss spec has a valid name and aggregation, and (``load=True``) its function imports and is callable."""
    assert isinstance(spec, LossSpec), f"expected a LossSpec, got {type(spec).__name__}"
    assert NAME_PATTERN.match(spec.name), f"loss name {spec.name!r} breaks the naming rule"
    assert spec.aggregation in AGGREGATIONS, f"aggregation {spec.aggregation!r} not in {AGGREGATIONS}"
    _check_options(spec.Options, f"loss {spec.name}")
    if load:
        assert callable(spec.load()), f"loss {spec.name!r}: {spec.fn!r} is not callable"


def check_registered(kind: PluginKind, name: str, *, distribution: str | None = None) -> Any:
    """The plugin is discovered through the ``tackroom`` entry-point group and loads.

    Uses a fresh :class:`PluginManager` (no allow/block lists), so it proves what a
    user's ``pip install`` would give. Returns the loaded class (or LossSpec).
    """
    manager = PluginManager(env={})
    names = [e.name for e in manager.entries(kind)]
    assert name in names, (
        f"{kind} {name!r} is not registered through the 'tackroom' entry-point group; found {names}. "
        "Declare [project.entry-points.tackroom] in the distribution's pyproject and reinstall it"
    )
    entry = manager.entry(kind, name)
    if distribution is not None:
        assert entry.distribution == distribution, (
            f"{kind} {name!r} comes from {entry.distribution}, expected {distribution}"
        )
    loaded = entry.load()
    if kind == "loss":
        check_loss_spec(loaded)
    else:
        check_plugin(loaded)
    return loaded
