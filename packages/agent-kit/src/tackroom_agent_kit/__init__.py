"""What a tackroom harness running a real agent inside the sandbox builds on.

- :class:`ModelRelay`: a per-trial relay between the agent and the policy, for every API dialect the gateway
  speaks; counts model calls, refuses past a turn limit, knows a call in flight from a hang, and fills what an agent
  cannot be told (the policy's sampling) into its calls.
- :func:`ensure_npm_install`: a pinned npm package installed once into tackroom's cache (agents ship as npm packages).
- :func:`make_once`: a host folder made once, whole (filled in a staging folder renamed into place), safe from
  concurrent trials and processes: what an agent runs from is never seen half written.
- :func:`reach_relay`, :func:`check_reachable`, :func:`served_context_length`: the policy from inside the sandbox.
- :class:`AgentControl`: start, watch and stop the agent headless, with every process it starts.
- :class:`AgentOptions`: the ``[harness]`` options every such harness has (a base to subclass).
- :func:`run_watched`, :func:`watch_run`, :func:`stopped_after`: the run from start to stop, and how it ended
  (:data:`Ending`).
- :func:`must_succeed`, :func:`check_it_runs`: setup steps in the sandbox, and the check that the agent runs there.
- :func:`crash_or_model`, :func:`answered`, :func:`exit_described`: whose failure a crash or a hang is.
- :class:`AgentCrashError`, :class:`AgentModelError`, :class:`AgentTimeoutError`: the failures, carrying the
  trajectory, for a harness to subclass under its own names.

``tackroom_agent_kit.testing`` holds the scripted engine behind the real gateway for such a harness's tests, and
``tackroom_agent_kit.commands`` the ``tackroom <agent> install`` command group. Importing this package is cheap (a
harness's registration runs in every ``tackroom`` command): each name below loads its module on first use.
"""

import tackroom

_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_agent_kit.control": ["AgentControl", "AgentControlError", "AgentState"],
    "tackroom_agent_kit.errors": ["AgentCrashError", "AgentModelError", "AgentTimeoutError"],
    "tackroom_agent_kit.made_once": ["make_once"],
    "tackroom_agent_kit.npm": ["NpmInstallError", "ensure_npm_install", "npm_arch"],
    "tackroom_agent_kit.options": ["AgentOptions", "Profile"],
    "tackroom_agent_kit.outcome": ["answered", "crash_or_model", "exit_described"],
    "tackroom_agent_kit.reach": ["PolicyUnreachableError", "check_reachable", "reach_relay", "served_context_length"],
    "tackroom_agent_kit.sandbox_setup": ["check_it_runs", "must_succeed"],
    "tackroom_agent_kit.relay": ["TURN_LIMIT_CODE", "BodyFill", "Dialect", "ModelRelay", "call_dialect", "filled",
                                 "is_model_call", "missing_from", "policy_root"],
    "tackroom_agent_kit.tool_choice": ["ToolChoice", "require_tool_call", "with_tool_choice"],
    "tackroom_agent_kit.watch": ["Ending", "run_watched", "stopped_after", "watch_run"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
