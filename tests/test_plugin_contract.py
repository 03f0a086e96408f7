"""The versioned plugin contract, as a plugin's author meets it: pip install into a fresh venv, then
`tackroom plugins --json` and `tackroom run`. A harness written for contract 1 is flagged and refused
before any sandbox starts; one written for contract 2 runs as before. What a plugin declares is the contract
too: a distribution written for contract 2 (a harness, a verifier and a loss, its harness naming a capability
of its own, which contract 2 allowed) loads whole, the capability ignored with a warning; a declaration this
tackroom refuses refuses the whole distribution, never half of it."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom._contract import CONTRACT_VERSION
from tackroom._errors import PluginNotFoundError
from tackroom._manager import PluginManager  # core's own, wherever the drivers' API re-exports it

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"
TASK = REPO / "examples" / "tasks" / "touch-done"


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    uv = shutil.which("uv")
    assert uv, "uv is needed to build the fresh venv (pip install uv)"
    venv = tmp_path_factory.mktemp("contract") / "venv"
    made = run(uv, "venv", "--python", "3.12", str(venv))
    assert made.returncode == 0, made.stderr
    installed = run(uv, "pip", "install", "--python", str(venv / "bin" / "python"), str(REPO / "core"),
                    str(REPO / "packages/app"),  # the `tackroom` command
                    str(REPO / "packages/sandbox-kit"),  # what the default sandbox builds on (not on an index)
                    str(REPO / "plugins/sandboxes/local"),  # the default sandbox, its own distribution
                    str(PLUGINS / "tackroom-greeter"), str(PLUGINS / "tackroom-toucher"))
    assert installed.returncode == 0, installed.stderr
    return venv


@pytest.mark.slow
def test_plugins_json_flags_the_contract_1_harness_and_keeps_the_current_one(venv):
    listed = run(str(venv / "bin" / "tackroom"), "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    greeter, toucher = rows["greeter"], rows["toucher"]
    assert (greeter["contract"], greeter["usable"]) == (1, False)
    assert "Harness.run" in greeter["problem"] and "run(instruction, sandbox, policy)" in greeter["problem"]
    assert "tackroom_contract = 3" in greeter["problem"]
    assert (toucher["contract"], toucher["usable"], toucher["problem"]) == (3, True, None)
    assert rows["oracle"]["usable"] and rows["local"]["usable"]

    table = run(str(venv / "bin" / "tackroom"), "plugins", env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})
    assert table.returncode == 0, table.stderr
    assert "not usable" in table.stdout and "greeter" in table.stdout


@pytest.mark.slow
def test_run_refuses_the_contract_1_harness_before_any_sandbox_starts(venv, tmp_path):
    out = tmp_path / "runs"
    refused = run(str(venv / "bin" / "tackroom"), "run", str(TASK), "--harness", "greeter", "--out", str(out))
    assert refused.returncode != 0
    message = " ".join(refused.stderr.split())
    assert "harness 'greeter' from tackroom-greeter 0.1.0 cannot run" in message
    assert "Harness.run" in message and "run(task, sandbox, policy)" in message
    assert not out.exists(), "refused before a run folder (let alone a sandbox) was made"


@pytest.mark.slow
def test_a_current_third_party_harness_still_runs_and_scores(venv, tmp_path):
    done = run(str(venv / "bin" / "tackroom"), "run", str(TASK), "--harness", "toucher", "--out",
               str(tmp_path / "runs"), "--json")
    assert done.returncode == 0, done.stderr
    trial = json.loads(done.stdout)["trials"][0]
    assert trial["error"] is None and trial["reward"] == 1.0


# -- what a plugin declares: a distribution written for contract 2 ----------------------------------------------
SHELL_MODULE = '''"""tackroom-shell: a harness, a verifier and a loss in one distribution, written for plugin contract 2."""

import tackroom

tackroom_contract = CONTRACT


class ShellScriptHarness(tackroom.Harness):
    """Touches /app/done.txt with a shell command; it calls no model."""

    name = "shell-script"
    capabilities = frozenset({HARNESS_CAPABILITY})  # contract 2 let a plugin name capabilities of its own

    async def run(self, task, sandbox, policy):
        await sandbox.exec("touch /app/done.txt")
        return tackroom.Trajectory(final_answer="touched")


class SaidTouchedVerifier(tackroom.Verifier):
    """1 when the harness says it touched the file."""

    name = "said-touched"

    async def verify(self, task, sandbox, trajectory):
        return tackroom.Reward(score=1.0 if trajectory.final_answer == "touched" else 0.0)


def reinforce(log_probs, old_log_probs, advantages, config, loss_mask=None, rollout_logprobs=None):
    return -(log_probs * advantages).mean(), {}


@tackroom.hookimpl
def tackroom_harnesses(register):
    register.add_harness(ShellScriptHarness)


@tackroom.hookimpl
def tackroom_verifiers(register):
    register.add_verifier(SaidTouchedVerifier)


@tackroom.hookimpl
def tackroom_losses(register):
    register.add_loss(tackroom.LossSpec(name="shell-reinforce", fn="tackroom_shell:reinforce",
                                        capabilities=frozenset({LOSS_CAPABILITY})))
'''

SHELL_PYPROJECT = """[project]
name = "tackroom-shell"
version = "0.1.0"
requires-python = ">=3.12"
dependencies = ["tackroom"]

[project.entry-points.tackroom]
shell = "tackroom_shell"

[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["src/tackroom_shell"]
"""

SHELL_PLUGINS = {("harness", "shell-script"), ("verifier", "said-touched"), ("loss", "shell-reinforce")}


def shell_distribution(root: Path, *, contract: int = 2, harness_capability: str = "model_free",
                       loss_capability: str = "old_logprobs") -> Path:
    """tackroom-shell's source tree, as its author keeps it (pip installs it); it names capabilities as given."""
    (root / "src" / "tackroom_shell").mkdir(parents=True)
    (root / "pyproject.toml").write_text(SHELL_PYPROJECT)
    module = (SHELL_MODULE.replace("CONTRACT", str(contract)).replace("HARNESS_CAPABILITY", repr(harness_capability))
              .replace("LOSS_CAPABILITY", repr(loss_capability)))
    (root / "src" / "tackroom_shell" / "__init__.py").write_text(module)
    return root


@pytest.fixture
def install_shell(tmp_path, monkeypatch):
    """Installs tackroom-shell into a folder on sys.path as pip lays it out (the package and its .dist-info, whose
    entry_points.txt names it), then returns a plugin manager that loads it beside core's built-ins."""

    def install(**declared):
        site = tmp_path / "site"
        shutil.copytree(shell_distribution(tmp_path / "tackroom-shell", **declared) / "src", site)
        info = site / "tackroom_shell-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tackroom-shell\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text("[tackroom]\nshell = tackroom_shell\n")
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.delitem(sys.modules, "tackroom_shell", raising=False)
        return PluginManager(env={"TACKROOM_LOAD_PLUGINS": "tackroom-shell"})

    return install


def shell_entries(manager) -> set[tuple[str, str]]:
    return {(e.kind, e.name) for e in manager.entries() if e.distribution == "tackroom-shell"}


def test_a_contract_2_distribution_loads_whole_and_its_own_capability_is_ignored_with_a_warning(install_shell, caplog):
    manager = install_shell(contract=2)
    with caplog.at_level("WARNING"):
        assert shell_entries(manager) == SHELL_PLUGINS
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "ShellScriptHarness, written for contract 2: capability 'model_free' is ignored" in warned
    assert "a closed list since plugin contract 3" in warned
    harness = manager.get("harness", "shell-script")
    assert manager.entry("harness", "shell-script").usable and harness.capabilities == frozenset()
    assert manager.entry("loss", "shell-reinforce").capabilities == {"old_logprobs"}
    assert manager.broken == [] and manager.refused == set()


def test_the_same_capability_from_a_contract_3_distribution_refuses_the_whole_distribution(install_shell):
    manager = install_shell(contract=3)
    assert shell_entries(manager) == set(), "not the verifier and the loss without the harness"
    assert manager.refused == {"tackroom-shell"}
    (why,) = manager.broken
    assert "tackroom-shell:shell failed in tackroom_harnesses" in why
    assert "'model_free' is not a capability" in why and "a closed list since plugin contract 3" in why
    for kind, name in SHELL_PLUGINS:
        with pytest.raises(PluginNotFoundError, match="failed in tackroom_harnesses: .*'model_free'"):
            manager.entry(kind, name)


def test_from_a_newer_contract_the_capability_is_ignored_and_every_plugin_says_upgrade_tackroom(install_shell):
    manager = install_shell(contract=CONTRACT_VERSION + 1)
    assert shell_entries(manager) == SHELL_PLUGINS and manager.broken == []
    for kind, name in SHELL_PLUGINS:
        assert f"newer than this tackroom's {CONTRACT_VERSION}: upgrade tackroom" in manager.entry(kind, name).problem


@pytest.mark.parametrize("contract", [2, 3])
def test_a_loss_spec_refusing_a_capability_in_the_last_hook_takes_back_what_the_distribution_registered(
        install_shell, contract):
    # A LossSpec checks its capabilities when it is built, before tackroom knows the contract: refused, whole.
    manager = install_shell(contract=contract, harness_capability="needs_policy", loss_capability="model_free")
    assert shell_entries(manager) == set(), "the harness and the verifier registered in earlier hooks are gone too"
    (why,) = manager.broken
    assert "failed in tackroom_losses" in why and "'model_free' is not a capability" in why


@pytest.mark.slow
def test_a_contract_2_distribution_with_a_capability_of_its_own_lists_and_runs(venv, tmp_path):
    source = shell_distribution(tmp_path / "tackroom-shell", contract=2)
    installed = run(shutil.which("uv"), "pip", "install", "--python", str(venv / "bin" / "python"), str(source))
    assert installed.returncode == 0, installed.stderr
    listed = run(str(venv / "bin" / "tackroom"), "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "capability 'model_free' is ignored" in listed.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(listed.stdout) if r["distribution"] == "tackroom-shell"}
    assert set(rows) == SHELL_PLUGINS and all(r["usable"] and r["contract"] == 2 for r in rows.values())

    done = run(str(venv / "bin" / "tackroom"), "run", str(TASK), "--harness", "shell-script", "--verifier",
               "said-touched", "--out", str(tmp_path / "runs"), "--json")
    assert done.returncode == 0, done.stderr
    trial = json.loads(done.stdout)["trials"][0]
    assert trial["error"] is None and trial["reward"] == 1.0
