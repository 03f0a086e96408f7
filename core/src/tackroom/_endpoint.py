"""One model endpoint, as configured: ``[policy]`` of a run or a training run, each ``[[models]]`` of a matrix;
:meth:`Endpoint.policy` turns it into the :class:`~tackroom.Policy` a harness receives."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from tackroom._errors import ConfigError
from tackroom._policy import Policy, redact_url, register_secret, register_secrets_in, register_url_secrets

LITELLM_PROXY_ENV = "LITELLM_PROXY_URL"
LITELLM_PROXY_DEFAULT = "http://127.0.0.1:4000/v1"
DEFAULT_MODEL = "default"
"""A model name that means: whatever the endpoint serves (its first ``/models`` entry)."""


class Endpoint(BaseModel):
    """A model endpoint and how trials call it: ``base_url`` (OpenAI-compatible, ending in ``/v1``) or ``litellm`` (a
    LiteLLM model name such as ``anthropic/claude-3-5-haiku``, through the proxy at ``base_url``,
    ``$LITELLM_PROXY_URL`` or http://127.0.0.1:4000/v1); neither: no model. ``model`` left out: the endpoint's own.
    """

    model_config = ConfigDict(extra="forbid")

    label: str | None = None
    """The name reports use (matrix columns, trial ids); default: the model name, else the endpoint's host."""
    base_url: str | None = None
    model: str | None = None
    litellm: str | None = None
    api_key: SecretStr | None = None
    """Sent as ``Authorization: Bearer …``; never written (dumps show ``**********``)."""
    api_key_env: str | None = None
    """Name of an environment variable holding the API key (keeps keys out of config files)."""
    tokenizer: str | None = None
    """Tokenizer matching the engine (a name tackroom knows, a local path or a hub id); the gateway needs it."""
    token_ids: bool = False
    """The endpoint takes prompt token ids and returns completion ids (a vLLM engine, the gateway)."""
    sampling: dict[str, Any] = Field(default_factory=dict)
    """Default sampling parameters (temperature, top_p, max_tokens …) sent on every call."""
    gateway: bool | None = None
    """Route through the policy gateway (exact token ids; ``true`` needs tackroom-gateway); default: when the
    harness speaks only chat and a gateway is installed (with core alone a chat harness calls the endpoint)."""

    @model_validator(mode="after")
    def _check(self) -> Endpoint:
        if self.litellm is not None and self.model is not None and self.model != self.litellm:
            raise ValueError("give either model or litellm, not both (litellm is the model name at the proxy)")
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("give either api_key or api_key_env, not both")
        register_secret(self.api_key)
        register_url_secrets(self.base_url)
        register_secrets_in(self.sampling)
        return self

    @property
    def configured(self) -> bool:
        """Whether there is a model to call at all."""
        return self.base_url is not None or self.litellm is not None

    @property
    def endpoint(self) -> str:
        """The base URL trials call."""
        if self.base_url is not None:
            return self.base_url.rstrip("/")
        return os.environ.get(LITELLM_PROXY_ENV, LITELLM_PROXY_DEFAULT).rstrip("/")

    @property
    def served_name(self) -> str | None:
        """The model name at the endpoint, when the config gives one."""
        return self.litellm or self.model

    def resolved_api_key(self) -> str:
        """The key to send: ``$api_key_env`` when named (it must be set; a key read from the environment is
        redacted from then on), else ``api_key``, else ``EMPTY``."""
        if self.api_key_env is None:
            return self.api_key.get_secret_value() if self.api_key is not None else "EMPTY"
        value = os.environ.get(self.api_key_env)
        if not value:
            where = f"model {self.label!r}: api_key_env" if self.label else "policy.api_key_env"
            raise ConfigError(f"{where}: environment variable {self.api_key_env} is not set; "
                              "export it or put api_key in the config")
        register_secret(value)
        return value

    def policy(self, served: str | None = None) -> Policy:
        """The :class:`Policy` trials receive (``served``: the model name the endpoint reported, when the
        config gives none)."""
        return Policy(base_url=self.endpoint, model=served or self.served_name or DEFAULT_MODEL,
                      api_key=self.resolved_api_key(), token_ids=self.token_ids, tokenizer=self.tokenizer,
                      sampling=dict(self.sampling), label=self.label)


async def served_model(endpoint: Endpoint, timeout: float = 30.0) -> str:
    """The model ``endpoint`` serves (its first ``/models`` entry), for a config that names none: an engine refuses
    the placeholder name. Unreachable or listing nothing: a :class:`ConfigError` saying to name the model."""
    import httpx  # here: every command imports this module, and httpx costs start-up time (tests/test_cli_startup.py)

    url = f"{endpoint.endpoint}/models"
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            reply = await client.get(url, headers={"Authorization": f"Bearer {endpoint.resolved_api_key()}"})
        reply.raise_for_status()
        return str(reply.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ConfigError(f"no model is named and {redact_url(url)} did not say what it serves ({type(exc).__name__}: "
                          f"{exc}); name it with --model or [policy] model") from exc
