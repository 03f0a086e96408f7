"""The loss interface: a named policy-loss function plus its token aggregation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationInfo, field_validator

from tackroom._capability import Capability, capabilities_of
from tackroom._errors import PluginDefinitionError
from tackroom._import_ref import import_ref
from tackroom._plugin import PluginOptions, check_name

Aggregation = Literal["token_mean", "sequence_mean", "prompt_mean"]
AGGREGATIONS: tuple[str, ...] = ("token_mean", "sequence_mean", "prompt_mean")


class LossSpec(BaseModel):
    """A loss registered by a plugin.

    ``fn`` is the callable or a ``"module:attr"`` reference imported on first use, so listing
    plugins never imports torch. Its signature follows SkyRL's policy-loss registry: ``fn(log_probs,
    old_log_probs, advantages, config, loss_mask, rollout_logprobs, ...) -> (loss, metrics)``.
    ``mappings`` says how the loss runs on a trainer backend that needs more than ``fn``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    fn: Callable[..., Any] | str
    aggregation: Aggregation = "token_mean"
    summary: str = ""
    Options: type[PluginOptions] = PluginOptions
    capabilities: frozenset[Capability] = frozenset()
    """:class:`~tackroom.Capability` names of kind ``loss`` (``old_logprobs``, ``rollout_logprobs``)."""
    mappings: dict[str, Callable[..., Any] | str] = {}
    """By trainer backend name (``"tinker"``, ``"skyrl"``): a function of the loss's validated options, or a
    ``"module:attr"`` reference to one, returning what that backend needs to run this loss (each trainer documents
    its value). Core never calls them."""
    _loaded: Callable[..., Any] | None = PrivateAttr(default=None)

    @field_validator("name", "capabilities", mode="before")
    @classmethod
    def _plugin_rules(cls, v: Any, info: ValidationInfo) -> Any:
        """Every plugin's rules for its name and capabilities."""
        try:
            if info.field_name == "name":
                return check_name(v, "LossSpec")
            return capabilities_of("loss", v, "LossSpec")
        except PluginDefinitionError as exc:  # pydantic reports ValueErrors as validation errors
            raise ValueError(str(exc)) from None

    @field_validator("fn", "mappings")
    @classmethod
    def _ref(cls, v: Any, info: ValidationInfo) -> Any:
        for ref in v.values() if isinstance(v, dict) else [v]:
            if isinstance(ref, str) and ":" not in ref:
                raise ValueError(f"{info.field_name} reference {ref!r} must look like 'package.module:function'")
        return v

    def load(self) -> Callable[..., Any]:
        """The loss callable (imports a ``"module:attr"`` reference on first call)."""
        if callable(self.fn):
            return self.fn
        if self._loaded is None:
            self._loaded = import_ref(self.fn)
        return self._loaded

    def mapping(self, backend: str) -> Callable[..., Any] | None:
        """The mapping declared for ``backend`` (a ``"module:attr"`` reference is imported), or None."""
        found = self.mappings.get(backend)
        return import_ref(found) if isinstance(found, str) else found
