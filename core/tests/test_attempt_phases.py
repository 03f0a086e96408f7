"""The attempt's phases and their rules: the network of each phase, services kept into grading, exhaustion as the
model's 0, the grader's clean run, separate grading's bounded copy, ``--allow-internet``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tackroom
import tackroom.testing
from tackroom import ExecResult, NetworkPolicy, Sandbox, SandboxError, SandboxExhaustedError, SandboxSpec
from tackroom._builtins.oracle_harness import OracleHarness
from tackroom._builtins.test_script_verifier import TestScriptVerifier
from tackroom._config import NetworkDefaults
from tackroom._manager import PluginManager
from tackroom._runtime import TrialPlugins, TrialRuntime
from tackroom._trial import Trial
from tackroom_local import LocalSandboxProvider

REWARD = "echo 1 > /logs/verifier/reward.txt\n"


def task_of(root: Path, test_sh: str = REWARD, solve_sh: str = "true", *, agent: str = "", verifier: str = "",
            environment: str = "") -> tackroom.Task:
    toml = f"[agent]\ntimeout_sec = 20\n{agent}[verifier]\ntimeout_sec = 20\n{verifier}[environment]\n{environment}"
    return tackroom.load_task(tackroom.testing.write_task(root, "t", test_sh=test_sh, solve_sh=solve_sh, toml=toml))


async def run(tmp_path: Path, task: tackroom.Task, provider=None, **kw) -> tackroom.TrialResult:
    rt = TrialRuntime(tmp_path / "run", progress=False, manager=PluginManager(), attempts=1, **kw)
    plugins = TrialPlugins(OracleHarness, OracleHarness.Options(), provider or LocalSandboxProvider(),
                           TestScriptVerifier, TestScriptVerifier.Options())
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="test-script")
    return await rt.run_trial(trial, task, plugins)


class SeesItsSpec(LocalSandboxProvider):
    """Local sandboxes that remember the spec each was made with and the networks set on them (a recorder, not a
    network switch: the local sandbox cannot switch)."""

    name = "sees-its-spec"
    specs: list[SandboxSpec] = []
    switched: list[NetworkPolicy] = []

    def create(self, spec):
        type(self).specs.append(spec)
        sandbox = super().create(spec)

        async def set_network(policy, *, timeout=60.0):
            type(self).switched.append(policy)

        sandbox.set_network = set_network
        return sandbox


async def test_a_task_that_declares_no_network_runs_offline_and_says_so(tmp_path):
    passed = await run(tmp_path / "a", task_of(tmp_path / "a"))
    assert passed.reward == 1.0
    assert any(n.startswith("the agent ran offline: the task declares no network") for n in passed.notes)
    assert any(n.startswith("grading ran offline") and "grading failed" not in n for n in passed.notes)
    graded_zero = await run(tmp_path / "b", task_of(tmp_path / "b", test_sh="echo 0 > /logs/verifier/reward.txt\n"))
    assert graded_zero.reward == 0.0
    assert not any("grading failed" in n for n in graded_zero.notes), "a test.sh that ran and gave 0 did not fail"
    offline = await run(tmp_path / "c", task_of(tmp_path / "c", test_sh=(
        "echo 'ERROR: Could not find a version that satisfies the requirement pytest (from versions: none)'\n"
        "echo 'ERROR: No matching distribution found for pytest'\necho 0 > /logs/verifier/reward.txt\n")))
    assert offline.reward == 0.0
    assert any("grading failed, and a test.sh that installs its tools" in n and "--allow-internet" in n
               for n in offline.notes), offline.notes


async def test_a_declared_network_and_the_runs_default_reach_the_sandbox(tmp_path):
    SeesItsSpec.specs, SeesItsSpec.switched = [], []
    declared = await run(tmp_path / "a", task_of(tmp_path / "a", environment='network_mode = "no-network"\n'),
                         SeesItsSpec())
    assert SeesItsSpec.specs[-1].network == NetworkPolicy() and not SeesItsSpec.switched
    assert not any("offline" in n for n in declared.notes), "a task that declares no-network gets no note"
    public = await run(tmp_path / "b", task_of(tmp_path / "b"), SeesItsSpec(), network=NetworkDefaults(agent="public",
                                                                                                     grading="public"))
    assert SeesItsSpec.specs[-1].network == NetworkPolicy(mode="public") and public.reward == 1.0
    assert not any("offline" in n for n in public.notes)


async def test_grading_switches_to_its_own_network_after_the_agent(tmp_path):
    SeesItsSpec.specs, SeesItsSpec.switched = [], []
    toml = {"agent": 'network_mode = "no-network"\n', "verifier": 'network_mode = "public"\n'}
    result = await run(tmp_path / "a", task_of(tmp_path / "a", **toml), SeesItsSpec())
    assert SeesItsSpec.specs[0].network == NetworkPolicy() and SeesItsSpec.switched == [NetworkPolicy(mode="public")]
    assert result.reward == 1.0

    class CannotSwitch(LocalSandboxProvider):
        """Local sandboxes that say they cannot change their network (the base class's answer)."""

        name = "cannot-switch"

        def create(self, spec):
            sandbox = super().create(spec)

            async def set_network(policy, *, timeout=60.0):
                raise NotImplementedError("no network switch here")

            sandbox.set_network = set_network
            return sandbox

    cannot = await run(tmp_path / "b", task_of(tmp_path / "b", **toml), CannotSwitch())
    assert any("cannot change its network once started, so grading ran with the agent phase's (no network), not "
               "the internet" in n for n in cannot.notes), cannot.notes


async def test_services_are_kept_by_default_and_a_sandbox_that_cannot_says_so(tmp_path):
    class CannotKeep(LocalSandboxProvider):
        """Local sandboxes that say they cannot keep services (the base class's answer)."""

        name = "cannot-keep"

        def create(self, spec):
            sandbox = super().create(spec)
            kill = sandbox.kill_processes

            async def kill_processes(*, timeout=10.0, keep_listening=False):
                if keep_listening:
                    raise NotImplementedError("no freezer here")
                return await kill(timeout=timeout) or []

            sandbox.kill_processes = kill_processes
            return sandbox

    result = await run(tmp_path / "a", task_of(tmp_path / "a"), CannotKeep())
    assert result.reward == 1.0
    assert any("cannot keep the agent's services into grading, so every process it started was killed" in n
               for n in result.notes)
    off = await run(tmp_path / "b", task_of(tmp_path / "b", verifier="keep_services = false\n"),
                    CannotKeep())
    assert off.reward == 1.0 and not any("services" in n for n in off.notes)


async def test_exhaustion_when_the_agents_turn_ends_is_the_models_zero_with_a_note(tmp_path):
    class PidsFull(LocalSandboxProvider):
        """Local sandboxes whose kill step meets a pid limit the agent filled (what a fork bomb leaves)."""

        name = "pids-full"

        def create(self, spec):
            sandbox = super().create(spec)

            async def kill_processes(*, timeout=10.0, keep_listening=False):
                raise SandboxExhaustedError("still alive after SIGKILL: 2 3; pids exhausted (512 of 512)")

            sandbox.kill_processes = kill_processes
            return sandbox

    result = await run(tmp_path, task_of(tmp_path), PidsFull())
    assert (result.reward, result.error.error_class, result.error.phase) == (0.0, "model", "kill_agent")
    assert any("the agent exhausted the sandbox" in n for n in result.notes)


class Scripted(Sandbox):
    """Answers every exec with one result: what a sandbox prints for the situation under test."""

    def __init__(self, stdout: str, exit_code: int = 1) -> None:
        super().__init__(SandboxSpec(name="scripted"))
        self.result = ExecResult(exit_code=exit_code, stdout=stdout)

    async def start(self) -> None: ...

    async def exec(self, cmd, *, cwd=None, env=None, timeout=60.0, stdin=None) -> ExecResult:
        return self.result

    async def upload(self, source, dest, *, timeout=120.0) -> None: ...

    async def download(self, source, dest, *, timeout=120.0) -> None: ...

    async def stop(self) -> None: ...


async def test_the_default_kill_tells_a_filled_pid_limit_from_a_broken_sandbox():
    with pytest.raises(SandboxExhaustedError, match=r"(?s)every pid the sandbox allows.*512 of 512"):
        await Scripted("still alive after SIGKILL: 7 8\npids exhausted (512 of 512)\n").kill_processes()
    with pytest.raises(SandboxError, match="processes survived") as err:
        await Scripted("still alive after SIGKILL: 7 8\n").kill_processes()
    assert err.value.error_class == "infra"
    with pytest.raises(NotImplementedError):
        await Scripted("").kill_processes(keep_listening=True)
    assert await Scripted("", exit_code=0).kill_processes() == []


async def test_test_sh_runs_clean(tmp_path):
    """HOME is fresh (the image's /etc/skel, nothing of the agent's home), no user site, the task's [verifier] env."""
    solve = "mkdir -p /root/.config/pip && echo '[global]' > /root/.config/pip/pip.conf && echo x > /root/.gitconfig\n"
    probe = ('if [ "$PYTHONNOUSERSITE" = 1 ] && [ "$GIVEN" = by-the-task ] && [ "$HOME" != /root ] '
             '&& [ "$(ls -A "$HOME")" = "$(ls -A /etc/skel 2>/dev/null)" ] && [ ! -e "$HOME/.gitconfig" ]; '
             "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n")
    result = await run(tmp_path / "a", task_of(tmp_path / "a", test_sh=probe, solve_sh=solve,
                                               verifier='env = {GIVEN = "by-the-task"}\n'))
    assert result.reward == 1.0, (result.error, result.reward_details)
    # A task whose tests need the agent's home says so: [verifier] env wins.
    home = 'if [ "$HOME" = /root ] && [ -e "$HOME/.gitconfig" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    opted = await run(tmp_path / "b", task_of(tmp_path / "b", test_sh=home, solve_sh=solve,
                                              verifier='env = {HOME = "/root"}\n'))
    assert opted.reward == 1.0, (opted.error, opted.reward_details)


async def test_separate_grading_copies_at_most_the_tasks_storage(tmp_path):
    toml = {"verifier": 'grading = "separate"\n', "environment": "storage_mb = 8\n"}
    sparse = "mkdir -p /app && truncate -s 64M /app/sparse.bin\n"
    result = await run(tmp_path / "a", task_of(tmp_path / "a", solve_sh=sparse, **toml))
    assert (result.reward, result.error.error_class, result.error.type) == (0.0, "model", "SandboxExhaustedError")
    assert "more than the task's storage (8 MB)" in result.error.message
    small = await run(tmp_path / "b", task_of(tmp_path / "b", solve_sh="mkdir -p /app && echo hi > /app/a.txt\n",
                                              **toml))
    assert small.reward == 1.0 and small.error is None


def test_allow_internet_is_a_run_flag_and_a_changed_network_refuses_a_resume(tmp_path):
    task = tackroom.testing.write_task(tmp_path / "tasks", "t", test_sh=REWARD, solve_sh="true")

    def tackroom_run(*flags):
        return subprocess.run([sys.executable, "-m", "tackroom_app._cli.main", "run", str(task), "--out", str(tmp_path),
                               "--run-id", "r", "--json", *flags], capture_output=True, text=True, timeout=300)

    online = tackroom_run("--allow-internet")
    assert online.returncode == 0, online.stderr
    (trial,) = json.loads(online.stdout)["trials"]
    assert trial["reward"] == 1.0 and not any("offline" in n for n in trial["notes"])
    offline = tackroom_run()
    assert offline.returncode == 2 and "network of tasks that declare none" in offline.stderr, offline.stderr


class MountingOracle(OracleHarness):
    """The oracle, with a host folder it asks to be bound (as a harness binds what it prepared once); its setup
    reads it inside the sandbox."""

    asked: list[str] = []
    seen: list[str] = []
    folder: Path = Path("/nonexistent")

    async def mounts(self, task):
        type(self).asked.append(task.id)
        return {"/mnt/prepared": type(self).folder}

    async def setup(self, sandbox, task):
        type(self).seen.append((await sandbox.exec("cat /mnt/prepared/made-once.txt")).stdout)
        await super().setup(sandbox, task)


class BindsNothing(SeesItsSpec):
    name = "binds-nothing"

    def create(self, spec):
        made = super().create(spec)
        return type("NoMounts", (type(made),), {"binds_mounts": False})(spec, self.options)


async def test_the_harness_mounts_reach_a_sandbox_that_binds_them_and_no_other(tmp_path):
    folder = tmp_path / "prepared"
    folder.mkdir()
    (folder / "made-once.txt").write_text("shared\n")
    for p in (tmp_path, folder):
        p.chmod(0o755)
    MountingOracle.folder, MountingOracle.asked, MountingOracle.seen = folder, [], []
    SeesItsSpec.specs = []
    task = task_of(tmp_path / "a")
    rt = TrialRuntime(tmp_path / "run", progress=False, manager=PluginManager(), attempts=1)
    for provider in (SeesItsSpec(), BindsNothing()):
        plugins = TrialPlugins(MountingOracle, MountingOracle.Options(), provider, TestScriptVerifier,
                               TestScriptVerifier.Options())
        trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox=provider.name,
                      verifier="test-script")
        result = await rt.run_trial(trial, task, plugins)
        assert result.reward == 1.0, result.error
    assert MountingOracle.asked == [task.id], "only the sandbox that binds mounts asks the harness"
    assert [s.mounts for s in SeesItsSpec.specs] == [{}, {"/mnt/prepared": folder}, {}]
    assert MountingOracle.seen == ["shared\n", ""]
    assert [p.name for p in folder.iterdir()] == ["made-once.txt"]


def test_a_mount_path_must_be_a_plain_absolute_sandbox_path():
    for bad in ("relative/x", "/", "//x", "/a/../b", "/a/./b", "/a/"):
        with pytest.raises(ValueError, match="normalised absolute"):
            SandboxSpec(name="m", mounts={bad: Path("/tmp")})
    with pytest.raises(ValueError, match="not an absolute path"):
        SandboxSpec(name="m", mounts={"/mnt/x": Path("relative")})
    assert SandboxSpec(name="m", mounts={"/mnt/x": Path("/tmp")}).mounts == {"/mnt/x": Path("/tmp")}
