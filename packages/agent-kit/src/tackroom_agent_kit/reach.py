"""The policy as seen from inside the sandbox: its context length, the relay forwarded in, and a fail-fast probe."""

from __future__ import annotations

import shlex
from urllib.parse import urlsplit

import httpx

from tackroom import InfraError, Policy, Sandbox
from tackroom.sandbox_features import PortForwarder
from tackroom_agent_kit.relay import ModelRelay


class PolicyUnreachableError(InfraError):
    """The agent in the sandbox cannot reach the policy (through the relay)."""


async def served_context_length(policy: Policy, timeout: float = 15.0) -> int | None:
    """``max_model_len`` of the policy's model, as its ``/models`` reports it (the gateway and vLLM do)."""
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            r = await client.get(f"{policy.base_url.rstrip('/')}/models",
                                 headers={"Authorization": f"Bearer {policy.api_key}"})
        r.raise_for_status()
        models = r.json().get("data") or []
    except (httpx.HTTPError, ValueError):
        return None
    chosen = next((m for m in models if m.get("id") == policy.model), models[0] if models else None)
    value = (chosen or {}).get("max_model_len")
    return int(value) if isinstance(value, int) and value > 0 else None


async def reach_relay(sandbox: Sandbox, relay: ModelRelay, policy_url: str, agent: str) -> str:
    """The relay's root URL as seen from inside the sandbox (append ``/v1`` for an OpenAI base URL): one forwarded
    host port, no host network."""
    assert relay.port is not None
    try:
        if not isinstance(sandbox, PortForwarder):
            raise NotImplementedError(f"{type(sandbox).__name__} is no PortForwarder")
        url = await sandbox.forward_host_port(relay.port)
    except NotImplementedError as exc:
        raise PolicyUnreachableError(
            f"{agent} runs inside the sandbox and calls the policy {policy_url} through a relay on the host, but "
            f"this sandbox cannot forward a host port into itself ({exc}). The local and docker sandboxes can; "
            "remote sandboxes (Modal, Daytona) are not supported by this harness yet"
        ) from exc
    return url.rstrip("/")


async def check_reachable(sandbox: Sandbox, url: str, policy_url: str, agent: str, timeout: float = 10.0) -> None:
    """Fail fast, with the fix, when the sandbox cannot open a connection to ``url`` (the relay to the policy)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    probe = f"timeout {timeout:g} bash -c {shlex.quote(f'exec 3<>/dev/tcp/{host}/{port}')}"
    result = await sandbox.exec(probe, timeout=timeout + 15)
    if not result.ok:
        raise PolicyUnreachableError(
            f"{agent} runs inside the sandbox but the sandbox cannot connect to the host at {host}:{port}, "
            f"where the harness relays its calls to the policy {policy_url} "
            f"({(result.stderr or 'connection refused or timed out').strip()[-300:]}). Harnesses with the "
            "`agent_in_sandbox` capability reach the host through Sandbox.forward_host_port (one port, no network)"
        )
