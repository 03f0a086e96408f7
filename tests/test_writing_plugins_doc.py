"""docs/writing-plugins.md stays true: every Python snippet runs (in order, in one namespace), every TOML
snippet parses, the example plugins it shows pass their kits, and its aggregation code is tackroom-losses'."""

from __future__ import annotations

import inspect
import re
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from tackroom.testing import check_loss_spec, check_plugin, run_verifier_checks

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "writing-plugins.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def snippets(language: str) -> list[tuple[int, str]]:
    """(line number, code) of every fenced block in ``language``."""
    text = DOC.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(2)) for m in FENCE.finditer(text) if m.group(1) == language]


@pytest.fixture(scope="module")
def doc() -> Iterator[dict]:
    """The namespace left by running every Python snippet of the page, top to bottom, as one module."""
    module = types.ModuleType("writing_plugins_doc")  # a real module: pydantic resolves annotations through it
    sys.modules[module.__name__] = module
    try:
        for line, code in snippets("python"):
            exec(compile(code, f"{DOC}:{line}", "exec"), module.__dict__)
        yield module.__dict__
    finally:
        del sys.modules[module.__name__]


def test_the_page_has_snippets_for_every_kind(doc):
    assert len(snippets("python")) >= 10
    for name in ("HelloHarness", "ShellChatHarness", "AuditedProvider", "ExactFilesVerifier", "REINFORCE",
                 "aggregation_factors"):
        assert name in doc, f"the page no longer defines {name}"
    for heading in ("### Harness", "### Sandbox provider", "### Verifier", "### Loss"):
        assert heading in DOC.read_text()


@pytest.mark.parametrize(("line", "code"), snippets("python"), ids=lambda v: str(v) if isinstance(v, int) else "")
def test_python_snippet_compiles(line, code):
    compile(code, f"{DOC}:{line}", "exec")


@pytest.mark.parametrize(("line", "code"), snippets("toml"), ids=lambda v: str(v) if isinstance(v, int) else "")
def test_toml_snippet_parses(line, code):
    tomllib.loads(code)


def test_the_example_plugins_have_the_plugin_shape(doc):
    for name in ("HelloHarness", "ShellChatHarness", "AuditedProvider", "ExactFilesVerifier"):
        check_plugin(doc[name])
    check_loss_spec(doc["REINFORCE"], load=False)


def test_the_sync_test_functions_on_the_page_pass(doc):
    names = [n for n, fn in doc.items() if n.startswith("test_") and inspect.isfunction(fn)
             and not inspect.iscoroutinefunction(fn)]
    assert {"test_reinforce_spec", "test_reinforce_sums_what_the_trainer_scaled", "test_hello_is_a_plugin"} <= set(names)
    for name in names:
        doc[name]()


def test_every_test_function_on_the_page_is_run_here(doc):
    """A test function on the page that this file does not call would be a snippet nobody runs."""
    on_page = [n for line, code in snippets("python") for n in re.findall(r"^(?:async )?def (test_\w+)", code, re.M)]
    assert len(on_page) == len(set(on_page)), f"two test functions on the page share a name: {on_page}"
    called_here = set(re.findall(r'doc\["(test_\w+)"\]', Path(__file__).read_text()))
    sync = {n for n in on_page if not inspect.iscoroutinefunction(doc[n])}
    assert set(on_page) - sync <= called_here, f"async test functions on the page not run: {set(on_page) - sync - called_here}"


async def test_the_harness_examples_pass_the_harness_kit(doc):
    await doc["test_shell_chat_conforms"]()
    await doc["test_hello_conforms"]()


async def test_the_sandbox_example_passes_the_sandbox_kit(doc):
    await doc["test_audited_conforms"]()


async def test_the_verifier_example_passes_the_verifier_kit(doc, tmp_path):
    report = await run_verifier_checks(doc["ExactFilesVerifier"])
    # Not installed through an entry point here; everything else holds.
    assert [r.name for r in report.failures] == ["registered"], report.failures
    assert {r.name for r in report.skipped} == {"planted_reward", "service_down"}
    await doc["test_exact_files_on_a_task_of_its_own"](tmp_path)
    with pytest.raises(AssertionError, match=r"failed 1 conformance check\(s\):\n  - registered: verifier 'exact-files'"):
        await doc["test_exact_files_conforms"]()  # as written on the page, for an installed plugin


def test_the_aggregation_code_is_what_tackroom_losses_does(doc):
    torch = pytest.importorskip("torch")
    aggregation = pytest.importorskip("tackroom_losses.aggregation")
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        mask = (torch.rand(6, 9, generator=generator) > 0.4).long()
        mask[2] = 0  # a fully masked sequence still counts
        groups = torch.tensor([0, 0, 1, 1, 2, 2])
        for name in ("token_mean", "sequence_mean", "prompt_mean"):
            ours = doc["aggregation_factors"](mask, name, groups, 3)
            theirs = aggregation.aggregation_scale(mask, name, group_ids=groups, num_groups=3).squeeze(-1)
            assert torch.allclose(ours, theirs), (name, ours, theirs)
