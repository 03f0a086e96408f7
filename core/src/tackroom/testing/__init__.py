"""Conformance kit: reusable checks every plugin's own tests call.

In the spirit of Inspect AI's sandbox ``self_check``: a plugin author writes

```python
from tackroom.testing import check_plugin, check_registered

def test_conforms():
    check_plugin(MySandbox)
    check_registered("sandbox", "mine", distribution="tackroom-mine")
```

Each check raises ``AssertionError`` with a message saying what to fix.
Kind-specific suites (sandbox, harness, verifier, loss) live in the
sub-modules and are re-exported here.
"""

from tackroom.testing.plugin_checks import check_loss_spec, check_plugin, check_registered
from tackroom.testing.sandbox_checks import (
    ALL_CHECKS as SANDBOX_CHECKS,
    SandboxCheckReport,
    SandboxCheckResult,
    run_sandbox_checks,
    sandbox_self_check,
)

__all__ = [
    "SANDBOX_CHECKS",
    "SandboxCheckReport",
    "SandboxCheckResult",
    "check_loss_spec",
    "check_plugin",
    "check_registered",
    "run_sandbox_checks",
    "sandbox_self_check",
]
