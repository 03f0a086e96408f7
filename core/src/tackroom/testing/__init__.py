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

Tasks for tests: ``write_task`` writes a Harbor-style task directory (instruction,
task.toml, tests/test.sh, solution/solve.sh, any other file); ``task_for_tests`` makes
a Task in memory.

A test double for what a plugin talks to: ``ScriptedChatServerForTests`` (a chat
endpoint that replays fixed replies, errors and delays; a subclass may override its
``_chat(RequestForTests) -> ResponseForTests`` route). Everything here needs only
core's own dependencies; the engine double that misbehaves at the connection level
(``MisbehavingEngine``: 429 with ``Retry-After``, hangs, dropped connections, token-id
completions) is ``tackroom_gateway.testing``, in the tackroom-gateway distribution.

For a test that needs what a machine may lack (Docker, the local engine, a model):
``skip_or_fail(reason)`` skips it with the reason locally and fails it under CI (``CI=true``).
"""

from tackroom.testing._ci import skip_or_fail
from tackroom.testing._report import CheckReport, CheckResult, SkipCheck
from tackroom.testing._served import RequestForTests, ResponseForTests, ServedForTests
from tackroom.testing._tasks import task_for_tests, write_task
from tackroom.testing.harness_checks import (
    ALL_CHECKS as HARNESS_CHECKS,
)
from tackroom.testing.harness_checks import (
    KIT_INSTRUCTION,
    KIT_SOLUTION,
    HarnessCheckReport,
    HarnessScript,
    harness_self_check,
    run_harness_checks,
    write_kit_task,
)
from tackroom.testing.plugin_checks import check_loss_spec, check_plugin, check_registered
from tackroom.testing.sandbox_checks import (
    ALL_CHECKS as SANDBOX_CHECKS,
)
from tackroom.testing.sandbox_checks import (
    SandboxCheckReport,
    run_sandbox_checks,
    sandbox_self_check,
)
from tackroom.testing.scripted_chat import ScriptedChatServerForTests, ScriptedReply
from tackroom.testing.verifier_checks import ALL_CHECKS as VERIFIER_CHECKS
from tackroom.testing.verifier_checks import (
    KIT_BAD,
    KIT_GOOD,
    VerifierCheckReport,
    VerifierScenario,
    run_verifier_checks,
    verifier_self_check,
    write_verifier_kit_task,
)

__all__ = [
    "CheckReport",
    "CheckResult",
    "HARNESS_CHECKS",
    "KIT_INSTRUCTION",
    "KIT_SOLUTION",
    "HarnessCheckReport",
    "HarnessScript",
    "RequestForTests",
    "ResponseForTests",
    "ScriptedChatServerForTests",
    "ServedForTests",
    "ScriptedReply",
    "SANDBOX_CHECKS",
    "SandboxCheckReport",
    "SkipCheck",
    "check_loss_spec",
    "check_plugin",
    "check_registered",
    "harness_self_check",
    "run_harness_checks",
    "run_sandbox_checks",
    "sandbox_self_check",
    "skip_or_fail",
    "task_for_tests",
    "write_kit_task",
    "write_task",
    "KIT_BAD",
    "KIT_GOOD",
    "VERIFIER_CHECKS",
    "VerifierCheckReport",
    "VerifierScenario",
    "run_verifier_checks",
    "verifier_self_check",
    "write_verifier_kit_task",
]
