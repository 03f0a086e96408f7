"""The adversarial sandbox checks (kill_processes, planted_symlinks, privileges) fail on sandboxes that are
broken the way issue 18 describes, pass on the real ``local`` sandbox, and report ``skipped`` (never
``passed``) when they cannot apply. The broken sandboxes are the real local sandbox with one defence
taken out; what they could damage is a world-writable temporary folder, never the host's own files."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import tackroom
from tackroom import ExecResult
from tackroom.testing import SANDBOX_CHECKS, run_sandbox_checks
from tackroom_local import LocalSandbox, LocalSandboxProvider
from tackroom_local import sandbox as local_sandbox
from tackroom_local import view as local_view
from tackroom_local.keeper import NamespaceKeeper
from tackroom_local.transfers import ViewTransfers, sandbox_parts
from tackroom_sandbox_kit import run_process

ONLY = {"privileges", "planted_symlinks", "kill_processes", "host_port_forward"}


def skip_all_but(*names: str) -> set[str]:
    return set(SANDBOX_CHECKS) - set(names)


def provider_of(cls: type[LocalSandbox], **options) -> LocalSandboxProvider:
    class Provider(LocalSandboxProvider):
        def create(self, spec: tackroom.SandboxSpec) -> LocalSandbox:
            return cls(spec, self.options)

    return Provider(options)


class NoKill(LocalSandbox):
    """kill_processes() that kills nothing."""

    async def kill_processes(self, *, timeout: float = 10.0) -> None:
        return None


class DefaultKill(LocalSandbox):
    """The interface's default kill_processes (KILL_ALL_SCRIPT run inside), not the namespace restart."""

    kill_processes = tackroom.Sandbox.kill_processes


class OldViewTransfers(ViewTransfers):
    """Transfers as the local sandbox did them before issue 18: a realpath check of the destination, then
    shutil on the host, which follows whatever links sit inside the destination."""

    def _host(self, path: str, workdir: str) -> Path:
        parts = sandbox_parts(path, workdir)
        root = self.ns.root
        host = root.joinpath(*parts)
        if not os.path.realpath(host).startswith(str(root / parts[0])):
            raise tackroom.SandboxPathError(f"{path!r} resolves outside the sandbox")
        return host

    def put(self, source: Path, dest: str, workdir: str, timeout: float) -> None:
        host = self._host(dest, workdir)
        if source.is_dir():
            shutil.copytree(source, host, dirs_exist_ok=True, symlinks=True)
        else:
            host.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, host)

    def get(self, source: str, dest: Path, workdir: str, timeout: float) -> None:
        host = self._host(source, workdir)
        if not host.exists():
            raise FileNotFoundError(source)
        if host.is_dir():
            shutil.copytree(host, dest, dirs_exist_ok=True, symlinks=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(host, dest)


class OldTransfers(LocalSandbox):
    """The local sandbox with :class:`OldViewTransfers`."""

    def __init__(self, spec: tackroom.SandboxSpec, options) -> None:
        super().__init__(spec, options)
        self.transfers = OldViewTransfers(self.namespaces, spec.storage_mb)


class HostNetworkKeeper(NamespaceKeeper):
    def isolation_flags(self) -> list[str]:
        return [*super().isolation_flags(), "--share-net"]


class SharesHostNetwork(LocalSandbox):
    """How agent_in_sandbox harnesses reached the policy before: the sandbox shares the host's network."""

    def __init__(self, spec: tackroom.SandboxSpec, options) -> None:
        super().__init__(spec, options)
        self.keeper = HostNetworkKeeper(self.namespaces)

    async def forward_host_port(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"


@pytest.fixture
def writable_host_dir():
    d = Path(tempfile.mkdtemp(prefix="tackroom-ro-bound-"))
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


class CapabilitiesKeeper(NamespaceKeeper):
    def isolation_flags(self) -> list[str]:
        return [f for f in super().isolation_flags() if f not in ("--disable-userns", "--cap-drop", "ALL")]


def keeps_capabilities(extra_ro_bind: Path) -> type[LocalSandbox]:
    class KeepsCapabilities(LocalSandbox):
        """Execs enter the user namespace but skip setpriv (they keep its capabilities), and bwrap neither drops
        them nor nests a further user namespace (which alone keeps bwrap's read-only binds read-only); a
        world-writable host folder is bound read-only at /bound, as /usr and /etc are."""

        def __init__(self, spec: tackroom.SandboxSpec, options) -> None:
            super().__init__(spec, options)
            self.keeper = CapabilitiesKeeper(self.namespaces)

        def _prepare(self) -> None:
            super()._prepare()
            self.namespaces.view.children["bound"] = local_view._Bind(str(extra_ro_bind))

        async def exec(self, cmd, *, cwd=None, env=None, timeout=600.0, stdin=None) -> ExecResult:
            ns = self.namespaces
            ns.alive()
            script = cmd if isinstance(cmd, str) else " ".join(local_sandbox._quote(c) for c in cmd)
            argv = ns.prefix + [ns.tools["nsenter"], "-t", str(ns.keeper_pid), "-U", "-m", "-u", "-i", "-n",
                                "-p", "-C", "-r", "-w", "--", ns.inside["env"], "-i", *(f"{k}={v}" for k, v in
                                {**self.env, **(env or {})}.items()), ns.inside["bash"], "-c",
                                f"cd {cwd or self.workdir} || exit 1\n{script}"]  # fmt: skip
            out = await run_process(argv, timeout=timeout, stdin=stdin.encode() if isinstance(stdin, str) else stdin, env={})
            return ExecResult(exit_code=out.returncode, stdout=out.stdout.decode(errors="replace"),
                              stderr=out.stderr.decode(errors="replace"))

    return KeepsCapabilities


async def test_the_real_local_sandbox_passes_the_adversarial_checks(tmp_path):
    report = await run_sandbox_checks(LocalSandboxProvider({"root_dir": str(tmp_path)}), skip=skip_all_but(*ONLY))
    assert {r.name: (r.passed, r.message) for r in report.results if r.name in ONLY} == dict.fromkeys(ONLY, (True, ""))
    assert report.timings["kill_processes_s"] < 1.0
    assert ONLY <= set(SANDBOX_CHECKS)


async def test_kill_processes_check_fails_when_processes_survive():
    report = await run_sandbox_checks(provider_of(NoKill), skip=skip_all_but("kill_processes"))
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"kill_processes"}, failed
    assert "still grows after kill_processes()" in failed["kill_processes"]
    for writer in ("background", "setsid", "nohup", "ignores-term"):
        assert writer in failed["kill_processes"], failed


async def test_the_interface_default_kill_processes_also_passes_the_check():
    """The default (SIGKILL everything but PID 1, inside) holds too, with the local sandbox's immune keeper."""
    report = await run_sandbox_checks(provider_of(DefaultKill), skip=skip_all_but("kill_processes"))
    assert not report.failures, report.failures


async def test_planted_symlinks_check_fails_on_the_old_shutil_transfers():
    report = await run_sandbox_checks(provider_of(OldTransfers), skip=skip_all_but("planted_symlinks"))
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"planted_symlinks"}, failed
    assert "changed the host folder" in failed["planted_symlinks"], failed


async def test_privileges_check_fails_when_execs_keep_their_capabilities(writable_host_dir):
    report = await run_sandbox_checks(provider_of(keeps_capabilities(writable_host_dir)), skip=skip_all_but("privileges"))
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"privileges"}, failed
    assert "WROTE /bound after mount -o remount,rw" in failed["privileges"], failed
    assert not [p for p in writable_host_dir.iterdir()], "the probe cleans up after itself"


async def test_host_port_forward_check_fails_when_the_sandbox_shares_the_host_network():
    report = await run_sandbox_checks(provider_of(SharesHostNetwork), skip=skip_all_but("host_port_forward"))
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"host_port_forward"}, failed
    assert "a host port that was not forwarded is reachable" in failed["host_port_forward"], failed


async def test_host_port_forward_is_skipped_where_the_sandbox_cannot_forward():
    class NoForward(LocalSandbox):
        async def forward_host_port(self, port: int) -> str:
            raise NotImplementedError("not here")

    report = await run_sandbox_checks(provider_of(NoForward), skip=skip_all_but("host_port_forward"))
    (result,) = [r for r in report.results if r.name == "host_port_forward"]
    assert result.skipped and "not here" in result.message


async def test_a_check_that_cannot_apply_is_skipped_not_passed():
    class NoSetsid(LocalSandbox):
        async def exec(self, cmd, **kw):
            if isinstance(cmd, str) and cmd.startswith("command -v setsid"):
                return ExecResult(exit_code=1, stdout="")
            return await super().exec(cmd, **kw)

    report = await run_sandbox_checks(provider_of(NoSetsid), skip=skip_all_but("kill_processes"))
    (result,) = [r for r in report.results if r.name == "kill_processes"]
    assert result.skipped and not result.passed and "setsid" in result.message
    assert report.skipped == [result] and report.failures == []
    report.assert_ok()


GRADING = {"planted_test_files", "fifo_at_read_path", "tampered_tools", "disk_fill"}


async def test_the_local_sandbox_holds_against_the_grading_attacks(tmp_path):
    report = await run_sandbox_checks(LocalSandboxProvider({"root_dir": str(tmp_path)}), skip=skip_all_but(*GRADING))
    results = {r.name: r for r in report.results if r.name in GRADING}
    if os.geteuid() != 0:  # storage_mb needs root on local; the check is skipped with the sandbox's note
        assert results.pop("disk_fill").skipped
    assert {n: (r.passed, r.message) for n, r in results.items()} == {n: (True, "") for n in results}


class NoRestoreWritableUsr(LocalSandbox):
    """Deliberately broken: grep can be replaced (a writable folder first on PATH) and nothing restores it."""

    async def start(self) -> None:
        await super().start()
        await self.exec("mkdir -p /opt/bin")
        self.env["PATH"] = "/opt/bin:" + self.env["PATH"]

    async def restore_image_tools(self, keep=None):
        return None


async def test_the_kit_fails_a_sandbox_whose_tools_the_agent_can_change(tmp_path):
    report = await run_sandbox_checks(provider_of(NoRestoreWritableUsr), skip=skip_all_but("tampered_tools"))
    (result,) = [r for r in report.results if r.name == "tampered_tools"]
    assert not result.passed and "cannot restore the image's tools" in result.message, result


GRADER = {"startup_hooks", "reward_prefill", "kept_services", "set_network"}


async def test_the_local_sandbox_holds_against_the_grader_isolation_checks(tmp_path):
    report = await run_sandbox_checks(LocalSandboxProvider({"root_dir": str(tmp_path)}), skip=skip_all_but(*GRADER))
    results = {r.name: r for r in report.results if r.name in GRADER}
    if os.geteuid() != 0:  # unprivileged, local keeps no services (NotImplementedError): skipped with the reason
        assert results.pop("kept_services").skipped
    assert {n: (r.passed, r.message) for n, r in results.items()} == {n: (True, "") for n in results}
    # /usr is the host's, read-only: nothing to add tools to or shadow with, and the kit says so
    report = await run_sandbox_checks(LocalSandboxProvider({"root_dir": str(tmp_path)}),
                                      skip=skip_all_but("added_tools_survive", "shadowed_shell"))
    assert all(r.skipped for r in report.results if r.name in ("added_tools_survive", "shadowed_shell"))


class SharedGrader(LocalSandbox):
    """The grader runs as a plain exec in the sandbox's own folders (core's default run_grader) with the
    sandbox's environment, and kept services are never frozen."""

    async def run_grader(self, cmd, *, private, collect, dest, cwd=None, env=None, timeout=600.0):
        from tackroom_local import services

        services.resume(self.namespaces.kept)
        result = await self.exec(cmd, cwd=cwd, env=env, timeout=timeout)
        await self.download(collect, dest)
        return result


async def test_the_grader_isolation_checks_fail_when_the_grader_shares_the_sandboxs_folders():
    checks = ("startup_hooks", "kept_services")
    report = await run_sandbox_checks(provider_of(SharedGrader), skip=skip_all_but(*checks))
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == set(checks) - ({"kept_services"} if os.geteuid() != 0 else set()), failed
    assert "start-up hooks the agent planted ran inside the grader's command" in failed["startup_hooks"]
