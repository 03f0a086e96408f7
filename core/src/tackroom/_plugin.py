"""What every plugin class has: a ``name``, an ``Options`` model and ``capabilities``."""

from __future__ import annotations

import abc
import inspect
import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from tackroom._errors import PluginDefinitionError

PluginKind = Literal["harness", "sandbox", "verifier", "loss"]
PLUGIN_KINDS: tuple[PluginKind, ...] = ("harness", "sandbox", "verifier", "loss")

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")


class PluginOptions(BaseModel):
    """Base of every plugin's ``Options``: unknown fields are errors, not ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Plugin(abc.ABC):
    """Base of harness, sandbox-provider and verifier classes.

    Subclasses set ``name`` (lowercase, digits, ``-``/``_``), may override
    ``Options`` (a :class:`PluginOptions` subclass whose fields are the plugin's
    config section) and ``capabilities`` (free-form feature tags a runtime or a
    user can check, e.g. ``{"token_ids"}`` for a harness with its own token
    accounting, ``{"expose"}`` for a sandbox that can publish ports).
    """

    kind: ClassVar[PluginKind]
    name: ClassVar[str]
    Options: ClassVar[type[PluginOptions]] = PluginOptions
    capabilities: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, options: PluginOptions | dict[str, Any] | None = None) -> None:
        if options is None:
            options = self.Options()
        elif isinstance(options, dict):
            options = self.Options.model_validate(options)
        elif not isinstance(options, self.Options):
            raise TypeError(f"{type(self).__name__} expects {self.Options.__name__}, got {type(options).__name__}")
        self.options = options

    @classmethod
    def summary(cls) -> str:
        """First line of the class docstring."""
        return first_line(cls.__doc__)


def first_line(doc: str | None) -> str:
    doc = inspect.cleandoc(doc or "")
    return doc.splitlines()[0] if doc else ""


def check_name(name: object, where: str) -> str:
    """Raise :class:`PluginDefinitionError` unless ``name`` follows the naming rule."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise PluginDefinitionError(
            f"{where}: plugin name {name!r} is invalid; use lowercase letters, digits and single "
            "'-' or '_' separators, starting with a letter (e.g. 'rubric-judge')"
        )
    return name


def check_plugin_class(cls: object, kind: PluginKind, base: type) -> type[Plugin]:
    """Validate a plugin class's shape at registration time."""
    where = getattr(cls, "__qualname__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginDefinitionError(f"{where} is registered as a {kind} but is not a subclass of {base.__name__}")
    check_name(getattr(cls, "name", None), where)
    options = getattr(cls, "Options", None)
    if not (isinstance(options, type) and issubclass(options, BaseModel)):
        raise PluginDefinitionError(f"{where}.Options must be a pydantic model (subclass tackroom.PluginOptions)")
    if options.model_config.get("extra") != "forbid":
        raise PluginDefinitionError(
            f"{where}.Options must forbid unknown fields so config typos are caught; "
            "subclass tackroom.PluginOptions or set model_config = ConfigDict(extra='forbid')"
        )
    caps = getattr(cls, "capabilities", None)
    if not isinstance(caps, frozenset) or not all(isinstance(c, str) for c in caps):
        raise PluginDefinitionError(f"{where}.capabilities must be a frozenset of strings")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))  # type: ignore[attr-defined]
        raise PluginDefinitionError(f"{where} does not implement: {missing}")
    return cls  # type: ignore[return-value]
