"""Conformance kit: reusable checks every plugin's own tests call.

In the spirit of Inspect AI's sandbox ``self_check``: a plugin author writes

```python
from tackroom.testing import check_plugin, check_registered

def test_conforms():
    check_plugin(MySandbox)
    check_registered("sandbox", "mine", distribution="tackroom-mine")
```

Each check raises ``AssertionError`` with a message saying what to fix.
Kind-specific suites live in the sub-modules and are re-exported here:
``sandbox_self_check``, ``harness_self_check``, ``verifier_self_check`` (and their
``run_*_checks`` forms returning a report), ``check_loss_spec`` for losses. A check
that cannot apply is reported skipped, with the reason, never passed.

Test doubles for what a plugin talks to: ``ScriptedChatServerForTests`` (a chat
endpoint that replays fixed replies) and ``MisbehavingEngine`` (an OpenAI-compatible
engine, ``/v1/completions`` with token ids and ``/v1/chat/completions``, scripted
with ``EngineReply`` to answer 429 with ``Retry-After``, 503, an HTML 500, hang,
drop the connection, send non-JSON or truncated JSON, or succeed after N failures),
so a harness's or gateway's handling of infra faults can be tested.
"""

from tackroom.testing.harness_checks import (
    ALL_CHECKS as HARNESS_CHECKS,
    KIT_INSTRUCTION,
    KIT_SOLUTION,
    HarnessCheckReport,
    HarnessCheckResult,
    HarnessScript,
    harness_self_check,
    run_harness_checks,
    write_kit_task,
)
from tackroom.testing.misbehaving_engine import EngineReply, EngineRequest, MisbehavingEngine
from tackroom.testing.plugin_checks import check_loss_spec, check_plugin, check_registered
from tackroom.testing.scripted_chat import ScriptedChatServerForTests, ScriptedReply
from tackroom.testing.sandbox_checks import (
    ALL_CHECKS as SANDBOX_CHECKS,
    SandboxCheckReport,
    SandboxCheckResult,
    SkipCheck,
    run_sandbox_checks,
    sandbox_self_check,
)
from tackroom.testing.verifier_checks import ALL_CHECKS as VERIFIER_CHECKS
from tackroom.testing.verifier_checks import (
    KIT_BAD,
    KIT_GOOD,
    VerifierCheckReport,
    VerifierCheckResult,
    VerifierScenario,
    run_verifier_checks,
    verifier_self_check,
    write_verifier_kit_task,
)

__all__ = [
    "EngineReply",
    "EngineRequest",
    "HARNESS_CHECKS",
    "KIT_INSTRUCTION",
    "KIT_SOLUTION",
    "MisbehavingEngine",
    "HarnessCheckReport",
    "HarnessCheckResult",
    "HarnessScript",
    "ScriptedChatServerForTests",
    "ScriptedReply",
    "SANDBOX_CHECKS",
    "SandboxCheckReport",
    "SandboxCheckResult",
    "SkipCheck",
    "check_loss_spec",
    "check_plugin",
    "check_registered",
    "harness_self_check",
    "run_harness_checks",
    "run_sandbox_checks",
    "sandbox_self_check",
    "write_kit_task",
    "KIT_BAD",
    "KIT_GOOD",
    "VERIFIER_CHECKS",
    "VerifierCheckReport",
    "VerifierCheckResult",
    "VerifierScenario",
    "run_verifier_checks",
    "verifier_self_check",
    "write_verifier_kit_task",
]
