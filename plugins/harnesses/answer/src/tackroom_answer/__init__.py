"""tackroom-answer: the ``answer`` harness, one chat completion with no tools, the reply written into the sandbox.

Registered through the ``tackroom`` entry-point group like any third-party plugin, by reference: every
``tackroom`` command loads every installed plugin's registration, and the harness's module imports httpx,
so a command that runs another harness never imports it; the class loads when a config names ``answer``.
:data:`ANSWER` is the one declaration of its name, summary and capabilities: the class takes it.
"""

from __future__ import annotations

import tackroom
from tackroom_answer.spec import ANSWER

tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_harnesses(register: tackroom.Registrar) -> None:
    register.add_harness(ANSWER)


_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_answer.harness": ["AnswerHarness", "AnswerOptions", "AnswerEndpointError", "AnswerModelError"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
