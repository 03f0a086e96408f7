"""The ``answer`` harness's registration, by reference: its module imports httpx, and every ``tackroom`` command
loads every plugin's registration, so a command that runs another harness (or none) never imports it; the class
loads when a config names ``answer``. The spec below is the one declaration of its name, summary and capabilities:
the class takes it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tackroom._capability import Capability
from tackroom._markers import hookimpl
from tackroom._plugin import PluginSpec

if TYPE_CHECKING:
    from tackroom._registrar import Registrar

ANSWER = PluginSpec(
    kind="harness",
    name="answer",
    reference="tackroom._builtins.answer_harness:AnswerHarness",
    summary="Asks the model once (chat completions, no tools) and writes its reply to a file in the sandbox.",
    capabilities=frozenset({Capability.NEEDS_POLICY, Capability.CHAT}),
)


@hookimpl
def tackroom_harnesses(register: Registrar) -> None:
    register.add_harness(ANSWER)
