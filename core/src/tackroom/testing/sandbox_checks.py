"""The sandbox conformance suite: one call proves a provider behaves like every other.

In the spirit of Inspect AI's sandbox ``self_check``. A provider's tests call

```python
from tackroom.testing import sandbox_self_check

async def test_my_sandbox_conforms():
    report = await sandbox_self_check(MyProvider())   # raises AssertionError listing every failed check
```

or :func:`run_sandbox_checks` for the :class:`SandboxCheckReport` without
raising. The checks use only the :class:`~tackroom._sandbox.Sandbox` interface
and tools of a minimal Debian (bash, coreutils, util-linux, tar); they never
send traffic anywhere. Each check runs under its own time limit, so a hanging
provider fails a check instead of hanging the test. A check that cannot apply
to a sandbox reports ``skipped`` (with the reason), never ``passed``.

``host_port_forward`` proves that an agent inside a sandbox without network
reaches the one host port it was given (its policy) and no other.
Three checks treat the sandbox as an adversary would: ``kill_processes``
(background, ``setsid``-double-forked, ``nohup``'d and SIGTERM-ignoring writers
all stop), ``planted_symlinks`` (links from inside the sandbox to host paths at
every transfer destination change no host file and bring no host file back)
and ``privileges`` (the sandbox cannot write a host file by its path nor any
of its own read-only mounts, even after ``mount -o remount,rw`` or ``unshare``); ``readonly_mounts`` (a
sandbox that binds ``SandboxSpec.mounts``: the host folder is neither changed nor replaced from inside, its
links reach no host file, and the next sandbox finds it as it was).
The grading attacks (:mod:`tackroom.testing.grading_checks`) come next: ``planted_test_files``,
``fifo_at_read_path``, ``tampered_tools`` and ``disk_fill``; then the grader's isolation
(:mod:`tackroom.testing.grader_checks`): ``added_tools_survive``, ``added_test_tooling``, ``shadowed_shell``,
``startup_hooks``, ``reward_prefill``, ``kept_services``, ``kept_service_write``, ``set_network`` and
``install_config`` (the grader's installs,
:mod:`tackroom.testing.install_checks`).
"""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import shlex
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tackroom._errors import SandboxError, SandboxPathError, SandboxTimeoutError
from tackroom._sandbox import PortExposer, ReadOnlyMounts, Sandbox, SandboxProvider, SandboxSpec
from tackroom.testing._context import CheckContext
from tackroom.testing._report import CheckReport, CheckResult, SkipCheck, known_skips, timed_check
from tackroom.testing.grader_checks import GRADER_CHECKS
from tackroom.testing.grading_checks import GRADING_CHECKS

SPEC_ENV_KEY = "TACKROOM_SELF_CHECK_SPEC_ENV"
BINARY = bytes(range(256)) * 64


class SandboxCheckReport(CheckReport):
    """Every check's result plus the timings a provider author wants to see."""

    provider: str
    timings: dict[str, float]
    """``start_s``, ``exec_round_trip_s`` (median of 5 ``true``), ``kill_processes_s``, ``stop_s``."""

    @property
    def subject(self) -> str:
        return f"sandbox {self.provider!r}"


Check = Callable[[Sandbox, "CheckContext"], Awaitable[None]]


def _default_spec() -> SandboxSpec:
    return SandboxSpec(name=f"self-check-{secrets.token_hex(4)}", env={SPEC_ENV_KEY: "from-spec"})


# -- the checks ---------------------------------------------------------------------


async def check_exec_basics(sb: Sandbox, ctx: CheckContext) -> None:
    """stdout and stderr are separate; a string runs under bash; a list is not shell-split."""
    r = await sb.exec("echo out; echo err >&2; [[ 1 == 1 ]] && echo bash", timeout=30)
    assert r.exit_code == 0, f"exit {r.exit_code}, stderr {r.stderr!r}"
    assert r.stdout == "out\nbash\n", f"stdout {r.stdout!r}, expected 'out\\nbash\\n' (is the string run by bash -c?)"
    assert r.stderr == "err\n", f"stderr {r.stderr!r}, expected 'err\\n'"
    assert not r.truncated, "small output reported as truncated"
    r = await sb.exec(["printf", "%s|", "two words", "$HOME"], timeout=30)
    assert r.stdout == "two words|$HOME|", f"a list command was shell-processed: {r.stdout!r}"


async def check_exit_codes(sb: Sandbox, ctx: CheckContext) -> None:
    """Exit codes propagate and a non-zero exit is a result, not an exception."""
    for code in (0, 1, 3, 42):
        r = await sb.exec(f"exit {code}", timeout=30)
        assert r.exit_code == code, f"`exit {code}` gave exit_code {r.exit_code}"
        assert r.ok == (code == 0)
    r = await sb.exec(["false"], timeout=30)
    assert r.exit_code == 1, f"['false'] gave exit_code {r.exit_code}"


async def check_exec_cwd(sb: Sandbox, ctx: CheckContext) -> None:
    """``cwd`` sets the working directory."""
    r = await sb.exec(f"mkdir -p {ctx.root}/work/dir", timeout=30)
    assert r.ok, r.stderr
    r = await sb.exec("pwd", cwd=f"{ctx.root}/work/dir", timeout=30)
    assert r.stdout.strip() == f"{ctx.root}/work/dir", f"pwd with cwd= gave {r.stdout.strip()!r}"
    r = await sb.exec("pwd", cwd="/", timeout=30)
    assert r.stdout.strip() == "/", f"pwd with cwd='/' gave {r.stdout.strip()!r}"


async def check_exec_env(sb: Sandbox, ctx: CheckContext) -> None:
    """``env`` reaches the command verbatim; the spec's env is set; per-exec env wins over it."""
    tricky = "two words $HOME 'q' \"dq\" ;|&"
    r = await sb.exec('printf %s "$CHECK_VAR"', env={"CHECK_VAR": tricky}, timeout=30)
    assert r.stdout == tricky, f"env value arrived as {r.stdout!r}, sent {tricky!r}"
    if ctx.spec.env.get(SPEC_ENV_KEY) == "from-spec":
        r = await sb.exec(f'printf %s "${SPEC_ENV_KEY}"', timeout=30)
        assert r.stdout == "from-spec", f"SandboxSpec.env not visible to exec: {r.stdout!r}"
        r = await sb.exec(f'printf %s "${SPEC_ENV_KEY}"', env={SPEC_ENV_KEY: "from-exec"}, timeout=30)
        assert r.stdout == "from-exec", f"exec env= does not override SandboxSpec.env: {r.stdout!r}"


async def check_exec_stdin(sb: Sandbox, ctx: CheckContext) -> None:
    """``stdin`` (str or bytes) is fed to the command and closed."""
    r = await sb.exec("cat", stdin="line one\nline two\n", timeout=30)
    assert r.stdout == "line one\nline two\n", f"stdin echoed back as {r.stdout!r}"
    r = await sb.exec("wc -c", stdin=b"\x00\x01\x02abc", timeout=30)
    assert r.stdout.strip() == "6", f"6 bytes of stdin counted as {r.stdout.strip()!r}"
    r = await sb.exec("cat; echo done", timeout=30)
    assert r.stdout == "done\n", f"without stdin= a reading command must see EOF at once, got {r.stdout!r}"


async def check_exec_timeout(sb: Sandbox, ctx: CheckContext) -> None:
    """A hung command raises SandboxTimeoutError on time, its processes are killed, the sandbox stays usable."""
    pids = f"{ctx.root}/hung.pids"
    await sb.exec(f"mkdir -p {ctx.root}", timeout=30)
    started = time.monotonic()
    try:
        await sb.exec(f"sleep 600 & echo $! > {pids}; echo $$ >> {pids}; exec sleep 600", timeout=2)
    except SandboxTimeoutError as exc:
        assert isinstance(exc, TimeoutError), "SandboxTimeoutError must be a TimeoutError"
    else:
        raise AssertionError("`sleep 600` with timeout=2 returned instead of raising SandboxTimeoutError")
    elapsed = time.monotonic() - started
    assert elapsed < 6, f"timeout=2 took {elapsed:.1f}s to fire"
    r = await sb.exec("echo usable", timeout=30)
    assert r.stdout == "usable\n", f"sandbox not usable after a timeout: {r!r}"
    survivors = ""
    for _ in range(20):  # killing may finish a moment after the error is raised
        r = await sb.exec(f'for p in $(cat {pids}); do [ -d /proc/$p ] && echo $p; done; true', timeout=30)
        survivors = r.stdout.split()
        if not survivors:
            break
        await asyncio.sleep(0.1)
    assert not survivors, f"processes of the timed-out command are still running: pids {survivors}"


async def check_large_output(sb: Sandbox, ctx: CheckContext) -> None:
    """5 MB of output is capped with ``truncated=True``, not an error."""
    started = time.monotonic()
    r = await sb.exec("head -c 5000000 /dev/zero | tr '\\0' a", timeout=60)
    assert r.truncated, f"5 MB of stdout came back whole ({len(r.stdout)} chars) and truncated=False"
    assert 0 < len(r.stdout) < 5_000_000, f"stdout length {len(r.stdout)} not capped"
    assert set(r.stdout) == {"a"}, "capped stdout holds bytes that were not produced"
    r = await sb.exec("head -c 5000000 /dev/zero >&2; echo after", timeout=60)
    assert r.truncated and r.stdout == "after\n", f"5 MB of stderr broke the command: truncated={r.truncated} stdout={r.stdout!r}"
    assert time.monotonic() - started < 30, "capping output took more than 30 s"


async def check_binary_round_trip(sb: Sandbox, ctx: CheckContext) -> None:
    """write_file/read_file keep all 256 byte values; parents are created; text is UTF-8."""
    path = f"{ctx.root}/bin/nested/data.bin"
    await sb.write_file(path, BINARY)
    back = await sb.read_file(path)
    assert back == BINARY, f"binary round trip changed the data ({len(back)} bytes back, {len(BINARY)} sent)"
    r = await sb.exec(f"cksum < {path}", timeout=30)
    assert r.ok and r.stdout.split()[1] == str(len(BINARY)), f"in-sandbox size differs: {r.stdout!r}"
    await sb.write_file(f"{ctx.root}/text.txt", "héllo\n")
    assert await sb.read_file(f"{ctx.root}/text.txt") == "héllo\n".encode(), "text written as str is not UTF-8"
    await sb.write_file(f"{ctx.root}/text.txt", "second")
    assert await sb.read_file(f"{ctx.root}/text.txt") == b"second", "write_file does not overwrite"


def _make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "a.txt": b"alpha\n",
        "sub/b.bin": bytes(range(256)),
        "sub/deeper/c.txt": b"gamma\n",
        "sub/deeper/deepest/d.sh": b"#!/bin/sh\necho d\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "sub/deeper/deepest/d.sh").chmod(0o755)
    (root / "empty").mkdir()
    return files


async def check_directory_transfer(sb: Sandbox, ctx: CheckContext) -> None:
    """upload/download of nested directories: contents land in dest, bytes and the executable bit survive."""
    src = ctx.local / "tree"
    src.mkdir()
    files = _make_tree(src)
    dest = f"{ctx.root}/uploaded"
    await sb.upload(src, dest)
    r = await sb.exec(f"cd {dest} && find . -type f | sort && test -d empty && echo EMPTY && test -x sub/deeper/deepest/d.sh && echo EXEC", timeout=30)
    listed = [line[2:] for line in r.stdout.split() if line.startswith("./")]
    assert listed == sorted(files), f"uploaded tree has {listed}, expected {sorted(files)} directly under {dest}"
    assert "EMPTY" in r.stdout, "an empty directory did not survive upload"
    assert "EXEC" in r.stdout, "the executable bit did not survive upload"
    await sb.exec(f"printf new > {dest}/sub/made-inside.txt", timeout=30)
    back = ctx.local / "downloaded"
    await sb.download(dest, back)
    for rel, data in files.items():
        assert (back / rel).is_file(), f"download is missing {rel}"
        assert (back / rel).read_bytes() == data, f"download changed {rel}"
    assert (back / "sub/made-inside.txt").read_bytes() == b"new", "a file made in the sandbox did not download"
    assert (back / "empty").is_dir(), "an empty directory did not download"
    one = ctx.local / "one-file.bin"
    await sb.download(f"{dest}/sub/b.bin", one)
    assert one.read_bytes() == bytes(range(256)), "downloading one file gave different bytes"
    single = ctx.local / "single.txt"
    single.write_bytes(b"single\n")
    await sb.upload(single, f"{ctx.root}/single/renamed.txt")
    assert await sb.read_file(f"{ctx.root}/single/renamed.txt") == b"single\n", "a file upload must land at dest itself"


async def check_path_traversal(sb: Sandbox, ctx: CheckContext) -> None:
    """``..`` escapes are refused with SandboxPathError (a PermissionError) on upload and download."""
    local = ctx.local / "traversal.txt"
    local.write_text("x")
    cases: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("upload to /tmp/../../etc/tackroom-escape", lambda: sb.upload(local, "/tmp/../../etc/tackroom-escape")),
        ("upload to ../tackroom-escape", lambda: sb.upload(local, "../tackroom-escape")),
        ("download of /tmp/../../etc/passwd", lambda: sb.download("/tmp/../../etc/passwd", ctx.local / "passwd")),
        ("download of ../../etc/passwd", lambda: sb.download("../../etc/passwd", ctx.local / "passwd2")),
        ("write_file to ../escape", lambda: sb.write_file("../escape", "x")),
    ]
    for what, call in cases:
        try:
            await call()
        except SandboxPathError as exc:
            assert isinstance(exc, PermissionError), "SandboxPathError must be a PermissionError"
        else:
            raise AssertionError(f"{what} was accepted; it must raise SandboxPathError")
    assert not (ctx.local / "passwd").exists(), "a refused download still wrote a file"


async def check_missing_download(sb: Sandbox, ctx: CheckContext) -> None:
    """Downloading or reading a path that does not exist raises FileNotFoundError."""
    for call, what in (
        (lambda: sb.download(f"{ctx.root}/no/such/file", ctx.local / "missing"), "download"),
        (lambda: sb.read_file(f"{ctx.root}/no-such-file"), "read_file"),
    ):
        try:
            await call()
        except FileNotFoundError:
            pass
        else:
            raise AssertionError(f"{what} of a missing path did not raise FileNotFoundError")


async def check_snapshot(sb: Sandbox, ctx: CheckContext) -> None:
    """snapshot(paths) is a tar holding the files; missing paths are skipped."""
    await sb.write_file(f"{ctx.root}/snap/one.txt", "one")
    await sb.write_file(f"{ctx.root}/snap/dir/two.bin", BINARY[:512])
    data = await sb.snapshot([f"{ctx.root}/snap/one.txt", f"{ctx.root}/snap/dir", f"{ctx.root}/not-there"])
    assert isinstance(data, bytes) and data, "snapshot returned no bytes"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name.lstrip("/").rstrip("/"): m for m in tar.getmembers()}
        root = ctx.root.lstrip("/")
        for rel, want in ((f"{root}/snap/one.txt", b"one"), (f"{root}/snap/dir/two.bin", BINARY[:512])):
            assert rel in members, f"snapshot lacks {rel}; it has {sorted(members)}"
            f = tar.extractfile(members[rel])
            assert f is not None and f.read() == want, f"snapshot holds different bytes for {rel}"


async def check_no_network(sb: Sandbox, ctx: CheckContext) -> None:
    """Without network the sandbox has no interface but loopback (nothing is sent anywhere)."""
    if ctx.spec.network.online:
        raise SkipCheck(f"the spec gives network ({ctx.spec.network.describe()})")
    r = await sb.exec("tail -n +3 /proc/net/dev 2>/dev/null | cut -d: -f1 | tr -d ' '", timeout=30)
    source = "/proc/net/dev"
    names = r.stdout.split()
    if not names:
        r = await sb.exec("ls /sys/class/net", timeout=30)
        source, names = "/sys/class/net", r.stdout.split()
    assert names, "could not list network interfaces (/proc/net/dev and /sys/class/net unreadable)"
    assert set(names) <= {"lo"}, f"network interfaces besides lo in {source}: {sorted(set(names) - {'lo'})}"


async def _connect_and_read(sb: Sandbox, url_or_port: str | int) -> tuple[bool, str]:
    port = str(url_or_port).rstrip("/").rsplit(":", 1)[-1]
    r = await sb.exec(f"timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && head -c 64 <&3'", timeout=30)
    return r.ok, r.stdout.strip()


async def check_host_port_forward(sb: Sandbox, ctx: CheckContext) -> None:
    """forward_host_port(p) reaches the host's 127.0.0.1:p from inside; without internet no other host port is
    reachable; the forward ends with kill_processes() (the end of the agent's turn)."""
    token = secrets.token_hex(8)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, what: str) -> None:
        writer.write(f"{what}-{token}\n".encode())
        await writer.drain()
        writer.close()

    wanted = await asyncio.start_server(lambda r, w: answer(r, w, "forwarded"), "127.0.0.1", 0)
    other = await asyncio.start_server(lambda r, w: answer(r, w, "other"), "127.0.0.1", 0)
    try:
        try:
            url = await sb.forward_host_port(wanted.sockets[0].getsockname()[1])
        except NotImplementedError as exc:
            raise SkipCheck(f"the sandbox cannot forward a host port: {exc}") from exc
        assert url.startswith("http://127.0.0.1:"), f"forward_host_port returned {url!r}, not http://127.0.0.1:PORT"
        ok, out = await _connect_and_read(sb, url)
        assert ok and out == f"forwarded-{token}", f"the forwarded port {url} did not reach the host server: {out!r}"
        if not ctx.spec.network.online:
            ok, out = await _connect_and_read(sb, other.sockets[0].getsockname()[1])
            assert not ok and token not in out, "a host port that was not forwarded is reachable from inside"
            await sb.kill_processes(timeout=30)
            ok, out = await _connect_and_read(sb, url)
            assert token not in out, "the forward still reaches the host after kill_processes()"
    finally:
        for server in (wanted, other):
            server.close()


async def check_kill_processes(sb: Sandbox, ctx: CheckContext) -> None:
    """kill_processes() stops background jobs, setsid'd double forks, nohup'd and SIGTERM-ignoring children; files stay."""
    d = f"{ctx.root}/kill"
    log = f"{d}/writers.log"
    tools = await sb.exec("command -v setsid && command -v nohup", timeout=30)
    if not tools.ok:
        raise SkipCheck(f"the sandbox lacks setsid or nohup (util-linux, coreutils): {tools.stdout.strip()!r}")
    r = await sb.exec(f"mkdir -p {d} && printf kept > {d}/kept.txt", timeout=30)
    assert r.ok, r.stderr

    def writer(tag: str) -> str:
        return f"while :; do echo {tag} >> {log}; sleep 0.05; done"

    tags = ("background", "setsid", "nohup", "ignores-term")
    started = await sb.exec(
        f"({writer('background')}) >/dev/null 2>&1 &\n"
        f"setsid bash -c '({writer('setsid')}) >/dev/null 2>&1 & exit 0' >/dev/null 2>&1 &\n"
        f"nohup bash -c '{writer('nohup')}' >/dev/null 2>&1 &\n"
        f"bash -c 'trap \"\" TERM HUP INT; {writer('ignores-term')}' >/dev/null 2>&1 &\n"
        "exit 0",
        timeout=30,
    )
    assert started.ok, f"could not start the writers: {started.stderr!r}"
    seen: set[str] = set()
    for _ in range(100):
        seen = set((await sb.exec(f"sort -u {log} 2>/dev/null; true", timeout=30)).stdout.split())
        if seen >= set(tags):
            break
        await asyncio.sleep(0.1)
    assert seen >= set(tags), f"writers {sorted(set(tags) - seen)} never wrote to {log} (the check itself is broken)"
    t = time.monotonic()
    await sb.kill_processes()
    ctx.timings["kill_processes_s"] = time.monotonic() - t
    size = "wc -c < " + log
    first = (await sb.exec(size, timeout=30)).stdout.strip()
    await asyncio.sleep(0.6)
    second = (await sb.exec(size, timeout=30)).stdout.strip()
    if first != second:
        last = (await sb.exec(f"tail -n 8 {log} | sort -u", timeout=30)).stdout.split()
        raise AssertionError(f"{log} still grows after kill_processes() ({first} -> {second} bytes); still writing: {last}")
    r = await sb.exec(f"echo usable; cat {d}/kept.txt", timeout=30)
    assert r.ok and r.stdout == "usable\nkept", f"after kill_processes() exec gave {r!r} (files must stay, exec must work)"
    await sb.kill_processes()  # with nothing left to kill it still succeeds


def _tree_state(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` (not following links): file bytes, link targets, folders."""
    state: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            state[rel] = "link:" + os.readlink(path)
        elif path.is_dir():
            state[rel] = "dir"
        else:
            state[rel] = path.read_bytes()
    return state


def _host_file_state(path: str) -> tuple[bytes, int] | None:
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            return f.read(), st.st_mtime_ns
    except OSError:
        return None


def _escaping_links(dest: Path) -> list[str]:
    """Links at or under ``dest`` that resolve outside it."""
    if not dest.exists() and not dest.is_symlink():
        return []
    top = os.path.realpath(dest.parent if dest.is_symlink() or not dest.is_dir() else dest)
    found = []
    for path in [dest, *(dest.rglob("*") if dest.is_dir() and not dest.is_symlink() else [])]:
        if path.is_symlink():
            real = os.path.realpath(path)
            if real != top and not real.startswith(top + os.sep):
                found.append(f"{path} -> {os.readlink(path)}")
            elif dest.is_symlink():
                found.append(f"{path} -> {os.readlink(path)} (the download itself is a link)")
    return found


def _holds(dest: Path, secret: bytes) -> list[str]:
    paths = [dest] if dest.is_file() else (list(dest.rglob("*")) if dest.is_dir() else [])
    return [str(p) for p in paths if p.is_file() and secret in p.read_bytes()]


async def check_planted_symlinks(sb: Sandbox, ctx: CheckContext) -> None:
    """Links planted inside the sandbox to host paths, at every transfer destination, change and bring back no host file."""
    secret = f"host-secret-{secrets.token_hex(8)}".encode()
    with tempfile.TemporaryDirectory(prefix="tackroom-victim-") as vtmp:
        victim_dir = Path(vtmp)
        victim = victim_dir / "secret.txt"
        victim.write_bytes(secret)
        (victim_dir / "inside").mkdir()
        before = _tree_state(victim_dir)
        etc_files = ["/etc/hostname", "/etc/passwd", "/etc/hosts"]
        etc_before = {p: _host_file_state(p) for p in etc_files}
        d = f"{ctx.root}/planted"
        escape = "/".join([".."] * 12) + str(victim)
        links = {
            "up-file": victim, "up-rel": escape, "up-dir": victim_dir, "up-parent": victim_dir, "dl-etc": "/etc/hostname",
            "wf-file": victim, "wf-parent": victim_dir, "dl-file": victim, "dl-dir": victim_dir, "rf-file": victim,
            "rf-parent": victim_dir, "tree/abs": victim, "tree/rel": escape, "tree/sub/dirlink": victim_dir,
            "up-tree/deeper": victim_dir, "up-tree/a.txt": victim,
        }  # fmt: skip
        plant = " && ".join(f"ln -s {shlex.quote(str(t))} {shlex.quote(f'{d}/{n}')}" for n, t in links.items())
        r = await sb.exec(f"mkdir -p {d}/tree/sub {d}/up-tree && printf ok > {d}/tree/sub/ok.txt && {plant}", timeout=30)
        if not r.ok:
            raise SkipCheck(f"the sandbox cannot make symlinks: {r.stderr.strip()[:200]!r}")
        payload = ctx.local / "payload.txt"
        payload.write_bytes(b"uploaded payload\n")
        tree = ctx.local / "payload-tree"
        (tree / "deeper").mkdir(parents=True)
        (tree / "a.txt").write_bytes(b"tree a\n")
        (tree / "deeper" / "b.txt").write_bytes(b"tree b\n")
        refusals = (SandboxPathError, PermissionError, FileNotFoundError)
        uploads = {
            "upload of a file to a link to a host file": (lambda: sb.upload(payload, f"{d}/up-file"), f"{d}/up-file"),
            "upload of a file to a relative link climbing to a host file": (lambda: sb.upload(payload, f"{d}/up-rel"),
                                                                             f"{d}/up-rel"),
            "upload of a folder to a link to a host folder": (lambda: sb.upload(tree, f"{d}/up-dir"), f"{d}/up-dir/a.txt"),
            "upload of a folder whose entries are links to host paths": (lambda: sb.upload(tree, f"{d}/up-tree"),
                                                                         f"{d}/up-tree/deeper/b.txt"),
            "upload of a file under a link to a host folder": (lambda: sb.upload(payload, f"{d}/up-parent/x.txt"),
                                                              f"{d}/up-parent/x.txt"),
            "write_file to a link to a host file": (lambda: sb.write_file(f"{d}/wf-file", "uploaded payload\n"),
                                                    f"{d}/wf-file"),
            "write_file under a link to a host folder": (lambda: sb.write_file(f"{d}/wf-parent/x.txt",
                                                                               "uploaded payload\n"), f"{d}/wf-parent/x.txt"),
        }  # fmt: skip
        for what, (call, landed) in uploads.items():
            try:
                await call()
            except refusals:
                continue
            assert _tree_state(victim_dir) == before, f"{what} changed the host folder {victim_dir}"
            expected = {"a.txt": b"tree a\n", "b.txt": b"tree b\n"}.get(landed.rsplit("/", 1)[-1], b"uploaded payload\n")
            r = await sb.exec(f"cat {shlex.quote(landed)}", timeout=30)
            assert r.ok and r.stdout.encode() == expected, f"{what} reported success but {landed} holds {r.stdout!r}"
        for path, state in etc_before.items():
            assert _host_file_state(path) == state, f"an upload through a planted link changed the host's {path}"
        downloads = {
            "download of a link to a host file": lambda dest: sb.download(f"{d}/dl-file", dest),
            "download of a link to /etc/hostname": lambda dest: sb.download(f"{d}/dl-etc", dest),
            "download of a link to a host folder": lambda dest: sb.download(f"{d}/dl-dir", dest),
            "download of a folder holding links to host paths": lambda dest: sb.download(f"{d}/tree", dest),
            "download of a file under a link to a host folder": lambda dest: sb.download(f"{d}/rf-parent/secret.txt", dest),
        }
        for i, (what, call) in enumerate(downloads.items()):
            dest = ctx.local / f"download-{i}"
            try:
                await call(dest)
            except refusals:
                pass
            escaping = _escaping_links(dest)
            assert not escaping, f"{what} created links out of the download: {escaping}"
            holding = _holds(dest, secret)
            assert not holding, f"{what} brought back the host file's content: {holding}"
            host_hostname = etc_before["/etc/hostname"]
            if host_hostname and host_hostname[0].strip() and dest.is_file() and "/etc/hostname" in what:
                assert dest.read_bytes() != host_hostname[0], f"{what} brought back the host's /etc/hostname"
        for path in (f"{d}/rf-file", f"{d}/rf-parent/secret.txt"):
            try:
                data = await sb.read_file(path)
            except (*refusals, IsADirectoryError):
                continue
            assert secret not in data, f"read_file({path}) returned the host file behind a planted link"
        kept = ctx.local / "download-3" / "sub" / "ok.txt"
        assert kept.is_file() and kept.read_bytes() == b"ok", "a folder holding planted links did not download its own files"
        assert _tree_state(victim_dir) == before, f"a transfer changed the host folder {victim_dir}"
        for path, state in etc_before.items():
            assert _host_file_state(path) == state, f"a transfer through a planted link changed the host's {path}"


_PSEUDO_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "securityfs", "debugfs", "tracefs", "bpf",
              "pstore", "configfs", "fusectl", "binfmt_misc", "hugetlbfs", "autofs", "efivarfs", "selinuxfs", "nsfs"}  # fmt: skip

_PROBE_MOUNTS = r"""
token=$1; shift
for m in "$@"; do
    q=$(printf %q "$m")
    if [ -d "$m" ] && [ ! -L "$m" ]; then
        p=$(printf %q "$m/.tackroom-probe-$token"); write="touch $p; rc=\$?; rm -f $p 2>/dev/null; exit \$rc"
    elif [ -f "$m" ] && [ ! -L "$m" ]; then write=": >> $q"
    else continue; fi
    bash -c "$write" >/dev/null 2>&1 && echo "WROTE $m with a plain write"
    bash -c "mount -o remount,rw,bind $q || exit 1; ($write); rc=\$?; mount -o remount,ro,bind $q; exit \$rc" \
        >/dev/null 2>&1 && echo "WROTE $m after mount -o remount,rw"
    unshare -Urm bash -c "mount -o remount,rw,bind $q || exit 1; $write" >/dev/null 2>&1 \
        && echo "WROTE $m after unshare -Urm and mount -o remount,rw"
done
true
"""


async def check_privileges(sb: Sandbox, ctx: CheckContext) -> None:
    """The sandbox cannot write a host file by its path, nor any of its read-only mounts (not even after remount/unshare)."""
    with tempfile.TemporaryDirectory(prefix="tackroom-canary-") as ctmp:
        os.chmod(ctmp, 0o777)  # only the sandbox's isolation protects these, not their modes
        canary = Path(ctmp) / "canary.txt"
        canary.write_bytes(b"canary")
        os.chmod(canary, 0o666)
        q = shlex.quote(str(canary))
        await sb.exec(f"echo written > {q}; echo written > /proc/1/root{q}; touch {shlex.quote(ctmp)}/new; true", timeout=30)
        assert canary.read_bytes() == b"canary", f"the sandbox wrote the host file {canary} by its path"
        assert not (Path(ctmp) / "new").exists(), f"the sandbox created a file in the host folder {ctmp}"
    r = await sb.exec("cat /proc/self/mounts", timeout=30)
    readonly: list[str] = []
    for line in r.stdout.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] in _PSEUDO_FS or "ro" not in fields[3].split(","):
            continue
        point = fields[1].encode().decode("unicode_escape")
        if point.split("/")[1:2] not in (["proc"], ["sys"], ["dev"]) and point not in readonly:
            readonly.append(point)
    if not readonly:
        return
    token = secrets.token_hex(4)
    r = await sb.exec(["bash", "-c", _PROBE_MOUNTS, "probe", token, *readonly[:200]], timeout=120)
    wrote = [line for line in r.stdout.splitlines() if line.startswith("WROTE")]
    assert not wrote, "the sandbox modified read-only mounts: " + "; ".join(wrote)


_ATTACK_MOUNT = r"""
m=$1
echo planted > "$m/new"; echo changed > "$m/file.txt"; touch "$m/sub/kept.txt"; chmod 777 "$m/file.txt"
rm -rf "$m/sub"; rm -f "$m/file.txt"; mv "$m/file.txt" "$m/moved"; ln -s /etc/passwd "$m/link"
mv "$m" "$m.old" && mkdir -p "$m" && echo replaced > "$m/file.txt"
mount -o remount,rw,bind "$m"; umount -l "$m"; unshare -Urm sh -c "mount -o remount,rw,bind $m && echo x > $m/new"
cat "$m/escape" "$m/climb" 2>/dev/null
true
"""


def _mode_state(root: Path) -> dict[str, tuple[bytes | str, int]]:
    return {rel: (v, (root / rel).lstat().st_mode) for rel, v in _tree_state(root).items()}


async def check_readonly_mounts(sb: Sandbox, ctx: CheckContext) -> None:
    """``SandboxSpec.mounts`` (a :class:`~tackroom.sandbox_features.ReadOnlyMounts` sandbox): a host folder bound at
    start reads as it is; nothing inside changes, replaces or unmounts it, an upload into it is refused, a link in
    it never reaches the host's files, and the next sandbox finds it exactly as before (pristine for the next trial)."""
    if not isinstance(sb, ReadOnlyMounts) or ctx.provider is None:
        raise SkipCheck("the sandbox binds no mounts (not a ReadOnlyMounts)")
    secret = f"mount-secret-{secrets.token_hex(8)}".encode()
    (ctx.local / "host-secret.txt").write_bytes(secret)
    host = ctx.local / "mounted"
    (host / "sub").mkdir(parents=True)
    (host / "file.txt").write_bytes(b"pristine")
    (host / "sub" / "kept.txt").write_bytes(b"kept")
    (host / "escape").symlink_to(ctx.local / "host-secret.txt")  # absolute host path: resolves inside, to nothing
    (host / "climb").symlink_to("../" * 12 + str(ctx.local / "host-secret.txt").lstrip("/"))
    for path in (ctx.local, host, host / "sub"):
        path.chmod(0o755)
    before = _mode_state(host)
    where = "/mnt/tackroom-check"
    spec = ctx.spec.model_copy(update={"name": f"{ctx.spec.name}-mounts", "mounts": {where: host}})
    for turn in ("first", "next"):
        other = ctx.provider.create(spec)
        try:
            await other.start()
            r = await other.exec(f"cat {where}/file.txt {where}/sub/kept.txt", timeout=30)
            assert r.ok and r.stdout == "pristinekept", f"the {turn} sandbox read {r.stdout!r} from the mount ({r.stderr[-300:]})"
            if turn == "first":
                r = await other.exec(["bash", "-c", _ATTACK_MOUNT, "attack", where], timeout=60)
                assert secret.decode() not in r.stdout, "a link in the mount reached the host's files"
                try:
                    await other.upload(ctx.local / "host-secret.txt", f"{where}/uploaded.txt", timeout=30)
                except (SandboxError, PermissionError, OSError):
                    pass
                after = await other.exec(f"cat {where}/file.txt", timeout=30)
                assert after.stdout == "pristine", f"the agent replaced the mount in place: it reads {after.stdout!r}"
        finally:
            await other.stop()
        assert _mode_state(host) == before, f"the {turn} sandbox changed the mounted host folder {host}"


async def check_declared_capabilities(sb: Sandbox, ctx: CheckContext) -> None:
    """What the provider's capabilities promise, its sandboxes keep: ``expose``: they are
    :class:`~tackroom.sandbox_features.PortExposer` s; ``persistent_processes``: a process started in the background
    by one ``exec`` is still running at the next."""
    if ctx.provider is None:
        raise SkipCheck("no provider to read the capabilities of")
    declared = type(ctx.provider).capabilities
    if "expose" in declared:
        assert isinstance(sb, PortExposer), f"{type(ctx.provider).__name__} declares 'expose' but its sandbox has no expose()"
    if "persistent_processes" in declared:
        started = await sb.exec("sleep 60 >/dev/null 2>&1 </dev/null & echo $!", timeout=30)
        pid = started.stdout.strip()
        assert started.ok and pid.isdigit(), f"could not start a background process: {started.stderr[-200:]}"
        alive = await sb.exec(["kill", "-0", pid], timeout=30)
        await sb.exec(["kill", pid], timeout=30)
        assert alive.ok, "declares 'persistent_processes' but a background process did not outlive its exec call"


CHECKS: dict[str, Check] = {
    "exec_basics": check_exec_basics,
    "exit_codes": check_exit_codes,
    "exec_cwd": check_exec_cwd,
    "exec_env": check_exec_env,
    "exec_stdin": check_exec_stdin,
    "exec_timeout": check_exec_timeout,
    "large_output": check_large_output,
    "binary_round_trip": check_binary_round_trip,
    "directory_transfer": check_directory_transfer,
    "path_traversal": check_path_traversal,
    "missing_download": check_missing_download,
    "snapshot": check_snapshot,
    "no_network": check_no_network,
    "host_port_forward": check_host_port_forward,
    "privileges": check_privileges,
    "planted_symlinks": check_planted_symlinks,
    "kill_processes": check_kill_processes,
    "declared_capabilities": check_declared_capabilities,
    "readonly_mounts": check_readonly_mounts,
    **GRADING_CHECKS,
    **GRADER_CHECKS,
}
"""Checks that share one started sandbox, in order. ``stop_idempotent`` and
``stop_never_started`` use sandboxes of their own."""

ALL_CHECKS = [*CHECKS, "stop_idempotent", "stop_never_started"]


async def _stop_idempotent(provider: SandboxProvider, spec: SandboxSpec, timings: dict[str, float]) -> None:
    sb = provider.create(spec.model_copy(update={"name": f"{spec.name}-stop"}))
    await sb.start()
    started = time.monotonic()
    await sb.stop()
    timings["stop_s"] = time.monotonic() - started
    await sb.stop()
    try:
        await sb.exec("true", timeout=30)
    except SandboxError:
        pass
    else:
        raise AssertionError("exec on a stopped sandbox must raise SandboxError")


async def _stop_never_started(provider: SandboxProvider, spec: SandboxSpec) -> None:
    sb = provider.create(spec.model_copy(update={"name": f"{spec.name}-unstarted"}))
    await sb.stop()
    await sb.stop()


async def run_sandbox_checks(
    provider: SandboxProvider,
    spec: SandboxSpec | None = None,
    *,
    skip: set[str] | frozenset[str] = frozenset(),
    check_timeout: float = 120.0,
) -> SandboxCheckReport:
    """Run every check (except ``skip``) and return the report; never raises for a failed check.

    ``spec`` defaults to a spec with a unique name and one env variable (so the
    env check can see it); pass your own to test an image or limits. Check
    names are in :data:`ALL_CHECKS`.
    """
    skip = known_skips("sandbox", skip, ALL_CHECKS)
    spec = spec or _default_spec()
    results: list[CheckResult] = []
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tackroom-self-check-") as tmp:
        sb = provider.create(spec)
        started = time.monotonic()
        start = await timed_check("start", sb.start(), max(check_timeout, spec.build_timeout_sec + spec.start_timeout_sec))
        timings["start_s"] = time.monotonic() - started
        results.append(start)
        try:
            if start.passed:
                round_trips = []
                for _ in range(5):
                    t = time.monotonic()
                    await sb.exec("true", timeout=30)
                    round_trips.append(time.monotonic() - t)
                timings["exec_round_trip_s"] = sorted(round_trips)[2]
                ctx = CheckContext(spec, Path(tmp), timings, provider)
                for name, check in CHECKS.items():
                    if name not in skip:
                        results.append(await timed_check(name, check(sb, ctx), check_timeout))
            else:
                results += [
                    CheckResult(name=n, passed=False, message="not run: the sandbox did not start")
                    for n in CHECKS
                    if n not in skip
                ]
        finally:
            await sb.stop()
    if "stop_idempotent" not in skip:
        results.append(await timed_check("stop_idempotent", _stop_idempotent(provider, spec, timings), check_timeout))
    if "stop_never_started" not in skip:
        results.append(await timed_check("stop_never_started", _stop_never_started(provider, spec), check_timeout))
    return SandboxCheckReport(provider=getattr(provider, "name", type(provider).__name__), results=results, timings=timings)


async def sandbox_self_check(
    provider: SandboxProvider,
    spec: SandboxSpec | None = None,
    *,
    skip: set[str] | frozenset[str] = frozenset(),
    check_timeout: float = 120.0,
) -> SandboxCheckReport:
    """Run the suite and raise ``AssertionError`` listing every failed check; return the report when all pass."""
    report = await run_sandbox_checks(provider, spec, skip=skip, check_timeout=check_timeout)
    report.assert_ok()
    return report


__all__ = [
    "ALL_CHECKS",
    "SandboxCheckReport",
    "run_sandbox_checks",
    "sandbox_self_check",
]
