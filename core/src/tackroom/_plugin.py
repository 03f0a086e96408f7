"""What every plugin has: a kind, a ``name``, an ``Options`` model and ``capabilities``, declared once.

A plugin class declares them as class attributes; a plugin registered by reference (its module imports a
heavy SDK) declares them in a :class:`PluginSpec` that the registration hands over and the class takes
with ``spec=``, so the name, summary and capabilities are written in one place.
"""

from __future__ import annotations

import abc
import inspect
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from tackroom._capability import Capability, capabilities_of
from tackroom._contract import CONTRACT_VERSION
from tackroom._errors import PluginDefinitionError

PluginKind = Literal["harness", "sandbox", "verifier", "loss", "executor"]
PLUGIN_KINDS: tuple[PluginKind, ...] = ("harness", "sandbox", "verifier", "loss", "executor")

KIND_BASES: dict[PluginKind, str] = {"harness": "Harness", "sandbox": "SandboxProvider", "verifier": "Verifier",
                                     "loss": "LossSpec", "executor": "Executor"}
"""What a plugin of each kind is: a subclass of that base, or for a loss a :class:`LossSpec`."""

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")


class PluginOptions(BaseModel):
    """Base of every plugin's ``Options``: unknown fields are errors, not ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoOptions(PluginOptions):
    """A plugin without settings (what an executor's ``[runtime.<name>]`` table holds by default)."""


@dataclass(frozen=True)
class PluginSpec:
    """A plugin declared by reference: the registration hands it over (``register.add_sandbox(MODAL)``), the class
    takes it (``class ModalProvider(tackroom.SandboxProvider, spec=MODAL)``) and is imported only when selected.
    ``options`` is the class's ``Options`` when it must be known before that (an executor's ``[runtime.<name>]``).
    """

    kind: PluginKind
    name: str
    reference: str
    """``"package.module:Class"``: where the class is."""
    summary: str
    capabilities: frozenset[Capability] = frozenset()
    options: type[BaseModel] | None = None

    def __post_init__(self) -> None:
        if self.kind not in PLUGIN_KINDS or self.kind == "loss":
            raise PluginDefinitionError(f"PluginSpec {self.name!r}: kind {self.kind!r} is not one of harness, "
                                        "sandbox, verifier, executor (a loss is a LossSpec)")
        module, _, qualname = self.reference.partition(":")
        if not module or not qualname:
            raise PluginDefinitionError(
                f"lazy {self.kind} reference {self.reference!r} must look like 'package.module:Class'")
        check_name(self.name, self.reference)
        object.__setattr__(self, "capabilities", capabilities_of(self.kind, self.capabilities, self.reference))
        if self.options is not None:
            check_options(self.options, f"{self.kind} {self.name!r}: its options")


class Plugin(abc.ABC):
    """Base of harness, sandbox-provider, verifier and executor classes.

    Subclasses set ``name`` (lowercase, digits, ``-``/``_``), may override ``Options`` (a
    :class:`PluginOptions` subclass whose fields are the plugin's config section) and ``capabilities``
    (:class:`~tackroom.Capability` names), or take them from a :class:`PluginSpec` with ``spec=``.
    """

    kind: ClassVar[PluginKind]
    name: ClassVar[str]
    Options: ClassVar[type[PluginOptions]] = PluginOptions
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    plugin_spec: ClassVar[PluginSpec | None] = None
    """The spec the class took with ``spec=`` (``None``: it declares itself in its attributes)."""

    def __init_subclass__(cls, spec: PluginSpec | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if spec is None:
            return
        here = f"{cls.__module__}:{cls.__qualname__}"
        if spec.reference != here or spec.kind != getattr(cls, "kind", None):
            raise PluginDefinitionError(f"{here} takes the spec of the {spec.kind} {spec.name!r}, which declares "
                                        f"{spec.reference}: a spec belongs to the one class it names")
        if spec.options is not None and "Options" in vars(cls):
            raise PluginDefinitionError(f"{here} sets Options and its spec sets options: declare them once")
        cls.plugin_spec, cls.name, cls.capabilities = spec, spec.name, spec.capabilities
        if spec.options is not None:
            cls.Options = spec.options  # type: ignore[assignment]

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
        """Its spec's summary (a class registered by reference), else the first line of its docstring."""
        spec = vars(cls).get("plugin_spec")
        if spec is not None:
            return spec.summary
        doc = inspect.cleandoc(cls.__doc__ or "")
        return doc.splitlines()[0] if doc else ""


def check_name(name: object, where: str) -> str:
    """Raise :class:`PluginDefinitionError` unless ``name`` follows the naming rule."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise PluginDefinitionError(
            f"{where}: plugin name {name!r} is invalid; use lowercase letters, digits and single "
            "'-' or '_' separators, starting with a letter (e.g. 'rubric-judge')"
        )
    return name


def check_options(options: object, where: str) -> type[BaseModel]:
    """Raise :class:`PluginDefinitionError` unless ``options`` is a pydantic model that forbids unknown fields."""
    if not (isinstance(options, type) and issubclass(options, BaseModel)
            and options.model_config.get("extra") == "forbid"):
        raise PluginDefinitionError(
            f"{where} must forbid unknown fields so config typos are caught: use a pydantic model that forbids "
            "unknown fields (subclass tackroom.PluginOptions, or set model_config = ConfigDict(extra='forbid'))")
    return options


def check_plugin_class(cls: object, kind: PluginKind, contract: int | None = CONTRACT_VERSION) -> type[Plugin]:
    """Validate a plugin class's shape at registration time: its kind, name, Options, capabilities."""
    where = getattr(cls, "__qualname__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, Plugin) and getattr(cls, "kind", None) == kind):
        raise PluginDefinitionError(f"{where} is registered as a {kind} but is not a subclass of {KIND_BASES[kind]}")
    check_name(getattr(cls, "name", None), where)
    check_options(getattr(cls, "Options", None), f"{where}.Options")
    if not isinstance(cls.capabilities, frozenset):
        raise PluginDefinitionError(f"{where}.capabilities must be a frozenset of capability names")
    known = capabilities_of(kind, cls.capabilities, f"{cls.__module__}:{where}", contract)
    if known != cls.capabilities:  # names its contract lets this tackroom ignore (it reads none of them): dropped
        cls.capabilities = known
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise PluginDefinitionError(f"{where} does not implement: {missing}")
    return cls
