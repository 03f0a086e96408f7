"""What a tackroom harness running a real agent inside the sandbox builds on.

- :class:`ModelRelay`: a per-trial relay between the agent and the policy, for every API dialect the gateway
  speaks; counts model calls, refuses past a turn limit, knows a call in flight from a hang.
- :func:`ensure_npm_install`: a pinned npm package installed once into tackroom's cache (agents ship as npm packages).
- :func:`reach_relay`, :func:`check_reachable`, :func:`served_context_length`: the policy from inside the sandbox.
- :class:`AgentControl`: start, watch and stop the agent headless, with every process it starts.
"""

from tackroom_agent_kit.control import AgentControl, AgentControlError, AgentState
from tackroom_agent_kit.npm import NpmInstallError, ensure_npm_install, npm_arch
from tackroom_agent_kit.reach import PolicyUnreachableError, check_reachable, reach_relay, served_context_length
from tackroom_agent_kit.relay import TURN_LIMIT_CODE, ModelRelay, is_model_call, policy_root

__all__ = [
    "TURN_LIMIT_CODE",
    "AgentControl",
    "AgentControlError",
    "AgentState",
    "ModelRelay",
    "NpmInstallError",
    "PolicyUnreachableError",
    "check_reachable",
    "ensure_npm_install",
    "is_model_call",
    "npm_arch",
    "policy_root",
    "reach_relay",
    "served_context_length",
]
