"""The ``answer`` harness's registration, by reference: its module imports httpx (~0.4 s of CPU here), and every
``tackroom`` command loads every plugin's registration, so a command that runs another harness (or none) never
imports it; the class loads when a config names ``answer``."""

from __future__ import annotations

from tackroom._markers import hookimpl

HARNESS_REF = "tackroom._builtins.answer_harness:AnswerHarness"
SUMMARY = "Asks the model once (chat completions, no tools) and writes its reply to a file in the sandbox."
CAPABILITIES = frozenset({"needs_policy", "chat"})
"""What the class declares; core/tests/test_answer_harness.py holds the registration and the class together."""


@hookimpl
def tackroom_harnesses(register) -> None:
    register.add_harness(HARNESS_REF, name="answer", summary=SUMMARY, capabilities=CAPABILITIES)
