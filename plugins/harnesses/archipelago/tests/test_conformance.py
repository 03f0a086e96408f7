"""The harness conformance kit (tackroom.testing) on the local sandbox, with the Acme world mounted."""

from __future__ import annotations

import json

from archipelago_paths import WORLD

from tackroom.testing import HarnessScript, harness_self_check
from tackroom_archipelago import ArchipelagoHarness
from tackroom_local import LocalSandboxProvider


def _call(name: str, **arguments: object) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


async def test_archipelago_passes_the_harness_conformance_kit():
    script = HarnessScript(
        solve=[_call("code_run_python", code="open('/app/kit.txt', 'w').write('kit-ok\\n')"), "The file is written."],
        idle=_call("files_list_directory", path="."),
        max_turns_option="max_steps",
    )
    report = await harness_self_check(
        ArchipelagoHarness, sandbox=LocalSandboxProvider(), script=script,
        options={"world": str(WORLD), "tools_include": ["files_*", "code_*"], "tool_call_timeout_sec": 20},
    )
    assert {r.name for r in report.results} >= {"solves_task", "max_turns", "malformed_reply", "agent_timeout", "engine_errors"}
