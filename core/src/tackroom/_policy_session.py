"""The per-attempt policy session: what a policy gateway hands the trial runtime for one attempt (through
:data:`PolicySessions`, its ``trial_sessions(sampling=..., label=...)``). The runtime runs the attempt with the
session's :attr:`~PolicySession.policy`, then asks it, in this order, how the engine behaved and what it recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from tackroom._errors import TackroomError
from tackroom._policy import Policy
from tackroom._trajectory import Trajectory
from tackroom._trial import Trial


class PolicySession(Protocol):
    """One attempt's session with the policy (the gateway's ``GatewayTrialSession`` implements it)."""

    policy: Policy
    """What the harness is given: the session's own base URL, model and tokenizer."""

    async def settle(self) -> None:
        """Awaited after a harness run that failed, before :meth:`error`: a session whose engine request was open
        when the turn ended and that nothing has judged yet makes its last check here (say one liveness probe),
        so a silent engine is ``infra`` at any agent timeout. Return at once when there is nothing to settle."""

    def error(self) -> TackroomError | None:
        """The engine's classification of a failed harness run (engine down → ``infra``, context exceeded →
        ``model``), or ``None``; it replaces the harness's error when given."""

    def unrecovered_error(self) -> TackroomError | None:
        """For a harness run that finished normally: the infra error the session ended on (an engine failure
        the harness swallowed), or ``None``. An ``infra`` error here voids the attempt's reward."""

    async def complete(self, trajectory: Trajectory) -> Trajectory:
        """The harness's trajectory with what the session recorded (exact token ids) merged in; closes the session."""


PolicySessions = Callable[[Trial], AbstractAsyncContextManager[PolicySession]]
"""``TrialPlugins.policy_for``: called per attempt with its trial, an async context manager over one session."""
