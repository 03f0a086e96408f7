"""The handle a harness uses to reach the model, and keeping its credentials off disk.

Credentials are revealed only where they are sent (the ``Authorization`` header, an SDK call). Everything a run
writes goes through :func:`redact` first, which masks ``SecretStr`` values and the values of secret-named keys
(``api_key``, ``token``, ``password`` …), URL userinfo (``http://user:pass@host`` → ``http://***@host``), and
every credential this process was given (:func:`register_secret`) wherever it appears in text, e.g. echoed
back in an HTTP 401 error body.
"""

from __future__ import annotations

import base64
import re
import threading
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

MASK = "***"
"""What a credential is replaced with when written."""

MIN_SECRET_CHARS = 6
"""Shorter values are not searched for in text (they would mask ordinary words); they are still masked as fields."""

PLACEHOLDER_KEYS = frozenset({"", "EMPTY", "none", "None", "null", "dummy", "sk-no-key-required"})
"""Values used where an endpoint needs no key: not secrets."""

_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s?#\"'<>]*)@")
_SECRET_KEY = re.compile(
    r"(?i)(api[-_]?keys?|apikey|secret|passw(or)?d|credential|private[-_]?key|authorization|"
    r"^(auth|access|bearer|hf|api|session|refresh|github|gh)?[-_]?token$)"
)

_lock = threading.Lock()
_secrets: set[str] = set()


def register_secret(value: str | SecretStr | None) -> None:
    """Remember a credential so :func:`redact` masks it wherever it shows up in text this process writes."""
    value = reveal(value)
    if not value or value in PLACEHOLDER_KEYS:
        return
    with _lock:
        _secrets.add(value)
        if len(value.strip()) >= MIN_SECRET_CHARS:  # pasted with blanks around: still that key
            _secrets.add(value.strip())


def register_url_secrets(url: str | None) -> None:
    """Remember the password (and user) in each URL's userinfo, raw and percent-decoded."""
    for match in _URL_USERINFO.finditer(url or ""):
        userinfo = match.group("userinfo")
        register_secret(userinfo)
        user, _, password = userinfo.partition(":")
        for part in (user, password):
            register_secret(part)
            register_secret(unquote(part))
        if user or password:  # what an HTTP client sends for it (Basic auth), should a server echo it
            plain = f"{unquote(user)}:{unquote(password)}"
            register_secret(base64.b64encode(plain.encode()).decode())


def reveal(value: str | SecretStr | None) -> str | None:
    """The plain value of a credential, for the one place it is sent."""
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def redact_url(url: str) -> str:
    """``http://user:pass@host/v1`` → ``http://***@host/v1`` (anything else unchanged)."""
    return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", url)


def is_secret_key(name: Any) -> bool:
    """Does a mapping key name a credential (``api_key``, ``api_keys``, ``password``, ``hf_token`` …)?"""
    if not isinstance(name, str) or name.lower().endswith(("_env", "-env")):  # names a variable, not a value
        return False
    return bool(_SECRET_KEY.search(name))


def redact_text(text: str) -> str:
    """Mask URL userinfo and every registered credential value in ``text``."""
    text = redact_url(text)
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for value in known:
        if len(value) >= MIN_SECRET_CHARS and value in text:
            text = text.replace(value, MASK)
    return text


def redact(data: Any, *, secret: bool = False) -> Any:
    """A copy of JSON-like ``data`` (dicts, lists, strings, pydantic models) safe to write to disk.
    ``secret``: ``data`` is a secret-named field's value: its strings are masked whole (placeholders
    aside), flags, numbers and ``None`` kept, anything else masked."""
    if secret and isinstance(data, (str, SecretStr)):
        return data if reveal(data) in PLACEHOLDER_KEYS else MASK
    if isinstance(data, SecretStr):
        return MASK
    if isinstance(data, BaseModel) and not secret:
        data = data.model_dump(mode="json", by_alias=True)
    if isinstance(data, dict):
        return {k: redact(v, secret=secret or is_secret_key(k)) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact(v, secret=secret) for v in data]
    if isinstance(data, str):
        return redact_text(data)
    return MASK if secret and not (data is None or isinstance(data, (bool, int, float))) else data


def register_secrets_in(data: Any, *, secret: bool = False) -> None:
    """Remember every credential inside plugin options: ``SecretStr`` values, the strings under a
    secret-named key (``secret``: ``data`` is such a key's value) and URL userinfo."""
    if isinstance(data, SecretStr) or (secret and isinstance(data, str)):
        register_secret(data)
    if isinstance(data, dict):
        for k, v in data.items():
            register_secrets_in(v, secret=secret or is_secret_key(k))
    elif isinstance(data, (list, tuple)):
        for v in data:
            register_secrets_in(v, secret=secret)
    elif isinstance(data, str) and "@" in data:
        register_url_secrets(data)


class Policy(BaseModel):
    """An OpenAI-compatible endpoint (``base_url`` ends in ``/v1``) plus what it can do.

    ``token_ids``: it takes prompt token ids on ``/completions`` and returns completion ids and logprobs (a vLLM
    engine, the policy gateway); ``tokenizer`` is the one that matches the engine. ``api_key`` is the plain key for
    the ``Authorization`` header, left out of ``repr`` and of every dump.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str
    api_key: str = Field(default="EMPTY", repr=False, exclude=True)
    token_ids: bool = False
    tokenizer: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    """Default sampling parameters (temperature, top_p, max_tokens …) sent on every call."""
    label: str | None = None
    """A short name for reports (``tackroom matrix`` rows); defaults to ``model``."""

    @field_validator("api_key", mode="before")
    @classmethod
    def _plain_key(cls, value: Any) -> Any:
        value = reveal(value) if isinstance(value, SecretStr) else value
        if isinstance(value, str):
            register_secret(value)
        return value

    @field_validator("base_url")
    @classmethod
    def _url_secrets(cls, value: str) -> str:
        register_url_secrets(value)
        return value

    @property
    def display_name(self) -> str:
        return self.label or self.model
