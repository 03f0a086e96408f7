"""The ``answer`` harness declared once: name, class reference, summary and capabilities (the class takes it)."""

import tackroom

ANSWER = tackroom.PluginSpec(
    kind="harness",
    name="answer",
    reference="tackroom_answer.harness:AnswerHarness",
    summary="Asks the model once (chat completions, no tools) and writes its reply to a file in the sandbox.",
    capabilities=frozenset({tackroom.Capability.NEEDS_POLICY, tackroom.Capability.CHAT}),
)
