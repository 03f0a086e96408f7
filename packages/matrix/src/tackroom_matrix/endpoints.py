"""Checking model endpoints before a matrix run, so a stopped engine costs seconds, not retried trials."""

from __future__ import annotations

import asyncio

import httpx
from pydantic import BaseModel, Field

from tackroom import ConfigError, InfraError
from tackroom_app import Endpoint


class EndpointUnreachableError(InfraError):
    """A model endpoint did not answer ``GET /models`` (the engine is not running, or the URL is wrong)."""


class EndpointStatus(BaseModel):
    """What a probe of one model's endpoint found."""

    label: str
    endpoint: str
    reachable: bool
    served: list[str] = Field(default_factory=list)
    model: str | None = None
    """The model name trials will ask for (configured, or the first one the endpoint serves)."""
    problem: str | None = None


def _fix(model: Endpoint) -> str:
    if model.litellm is not None:
        return f"start a LiteLLM proxy serving it (e.g. `litellm --model {model.litellm}`) or set base_url"
    fix = "start the model with `tackroom model up` (it prints the base URL) or fix base_url"
    running = _local_engine_url()
    if running is not None and running.rstrip("/") != model.endpoint:
        fix += f"; the engine `tackroom model up` started answers at {running}"
    return fix


def _local_engine_url() -> str | None:
    try:
        from tackroom_engine import running_engine_url
    except ImportError:  # the engine is its own distribution (tackroom-engine); not installed: no hint
        return None
    try:
        return running_engine_url()
    except Exception:
        return None


async def probe(model: Endpoint, timeout: float = 5.0) -> EndpointStatus:
    """``GET {endpoint}/models``; never raises. An endpoint that answers but does not serve ``model`` is a problem too."""
    endpoint = model.endpoint
    status = EndpointStatus(label=str(model.label), endpoint=endpoint, reachable=False)
    try:
        headers = {"Authorization": f"Bearer {model.resolved_api_key()}"}
    except ConfigError as exc:  # a missing api_key_env: report it with the endpoint, do not crash the run
        status.problem = str(exc)
        return status
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            response = await client.get(f"{endpoint}/models", headers=headers)
    except httpx.HTTPError as exc:
        status.problem = (f"model {model.label!r}: {endpoint} is not reachable ({type(exc).__name__}: "
                          f"{exc or 'no answer'}); {_fix(model)}")
        return status
    if response.status_code in (401, 403):
        status.problem = (f"model {model.label!r}: {endpoint} refused the API key (HTTP {response.status_code}); "
                          "set api_key or api_key_env")
        return status
    if response.status_code >= 400:
        status.problem = f"model {model.label!r}: GET {endpoint}/models answered HTTP {response.status_code}; {_fix(model)}"
        return status
    try:
        served = [str(m["id"]) for m in response.json().get("data", []) if isinstance(m, dict) and "id" in m]
    except (ValueError, AttributeError):
        served = []
    status.served = served
    wanted = model.served_name
    if wanted is None:
        if not served:
            status.problem = (f"model {model.label!r}: {endpoint}/models lists no model; set `model` to the name "
                              "the endpoint serves")
            return status
        wanted = served[0]
    elif served and wanted not in served:
        status.problem = (f"model {model.label!r}: {endpoint} does not serve {wanted!r}; it serves "
                          f"{', '.join(served)} (set `model` to one of them)")
        return status
    status.reachable = True
    status.model = wanted
    return status


async def probe_all(models: list[Endpoint], timeout: float = 5.0) -> dict[str, EndpointStatus]:
    """Probe every model concurrently; keyed by label."""
    found = await asyncio.gather(*(probe(m, timeout) for m in models))
    return {s.label: s for s in found}
