"""Capabilities: what a plugin promises beyond its kind's methods, from a closed list that someone reads."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from enum import StrEnum

from tackroom._contract import CAPABILITIES_CLOSED, CONTRACT_VERSION, UNDECLARED_CONTRACT
from tackroom._errors import PluginDefinitionError

log = logging.getLogger(__name__)


class Capability(StrEnum):
    """A promise a plugin makes, read by the runtime, the trainer or the matrix; each belongs to one kind.

    A capability is a string enum, so ``"chat" in cls.capabilities`` and ``Capability.CHAT in
    cls.capabilities`` both work. A name not listed here is a :class:`PluginDefinitionError` at
    registration that lists the capabilities of that kind: a tag nobody reads would promise nothing.
    """

    kind: str
    meaning: str

    def __new__(cls, value: str, kind: str, meaning: str) -> Capability:
        member = str.__new__(cls, value)
        member._value_ = value
        member.kind, member.meaning = kind, meaning
        return member

    NEEDS_POLICY = "needs_policy", "harness", "calls a model; a run without a policy endpoint is refused"
    CHAT = "chat", "harness", "speaks only chat completions: routed through the policy gateway when one is installed"
    TOKEN_IDS = "token_ids", "harness", "keeps its own exact token accounting (/v1/completions with token ids)"
    AGENT_IN_SANDBOX = "agent_in_sandbox", "harness", "its agent runs inside the sandbox and reaches the policy there"
    DOCKERFILE = "dockerfile", "sandbox", "builds a task's environment/Dockerfile fully"
    NETWORK = "network", "sandbox", "can grant a task internet access"
    NETWORK_ALLOWLIST = "network_allowlist", "sandbox", "enforces network_mode = \"allowlist\" in either phase"
    EXPOSE = "expose", "sandbox", "can publish a port of the sandbox to the harness"
    PERSISTENT_PROCESSES = "persistent_processes", "sandbox", "processes the agent starts outlive its exec call"
    SNAPSHOT = "snapshot", "verifier", "grades files it snapshots out of the sandbox"
    LLM_JUDGE = "llm_judge", "verifier", "asks an LLM judge (needs a judge endpoint)"
    CHANGES_REPORT = "changes_report", "verifier", "reports what the agent changed in the world"
    OLD_LOGPROBS = "old_logprobs", "loss", "needs the old policy's logprobs (a forward pass before the update)"
    ROLLOUT_LOGPROBS = "rollout_logprobs", "loss", "uses the rollout engine's logprobs, so that pass may be skipped"


def capabilities_of(kind: str, values: Iterable[object], where: str,
                    contract: int | None = CONTRACT_VERSION) -> frozenset[Capability]:
    """``values`` as capabilities of a ``kind`` plugin written for ``contract``: a name not listed for ``kind`` is a
    :class:`PluginDefinitionError` naming those there are, or, under a contract before ``CAPABILITIES_CLOSED`` (or
    one newer than this tackroom's, refused as such), dropped with a warning."""
    if isinstance(values, str):  # a bare string would be read letter by letter
        raise PluginDefinitionError(f"{where}: capabilities must be a set of names, not the string {values!r}")
    found: set[Capability] = set()
    for value in values:
        capability = Capability._value2member_map_.get(value) if isinstance(value, str) else None
        if capability is None or capability.kind != kind:
            listed = ", ".join(c.value for c in Capability if c.kind == kind) or "(none)"
            why = f"is a {capability.kind} capability" if capability else "is not a capability"
            closed = f"{kind} capabilities: {listed} (a closed list since plugin contract {CAPABILITIES_CLOSED})"
            declared = UNDECLARED_CONTRACT if contract is None else contract
            if isinstance(declared, int) and not CAPABILITIES_CLOSED <= declared <= CONTRACT_VERSION:
                log.warning("tackroom plugin %s, written for contract %s: capability %r is ignored: it %s; %s",
                            where, declared, value, why, closed)
                continue
            raise PluginDefinitionError(f"{where}: {value!r} {why}; {closed}")
        found.add(capability)  # type: ignore[arg-type]
    return frozenset(found)
