"""The binary a trial runs is whole and never changes under it: trials that start while npm is still writing
OpenCode, installs that run at once, a reinstall while OpenCode runs, and a sandbox that binds the build.

A SIGBUS at start-up was a trial's copy of a binary npm was still writing: npm writes each file in place,
executable from its first byte, so the cache looked installed and a trial copied what was there then. Its ELF
segments reach past the end of the short copy, and the first touch of a page there is a bus error. The fake npm
here writes as npm does (in place, executable at once, in slow chunks), so a trial can arrive mid-write.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from pathlib import Path

import pytest

from tackroom import load_task
from tackroom_app import sandbox_spec
from tackroom_local import LocalSandboxProvider
from tackroom_opencode.harness import OpenCodeHarness
from tackroom_opencode.install import DEFAULT_VERSION, ensure_installed, platform_packages

BINARY = f"#!/bin/sh\necho {DEFAULT_VERSION}\nexit 0\n".encode() + b"#" * (1 << 20) + b"\n"
"""A stand-in for OpenCode (a script answering its version), long enough to be written in 32 slow chunks."""

FAKE_NPM = """#!{python}
import os, sys, time
prefix = sys.argv[sys.argv.index("--prefix") + 1]
with open({log!r}, "a") as log:
    log.write(prefix + "\\n")
folder = os.path.join(prefix, "node_modules", {package!r}, "bin")
os.makedirs(folder, exist_ok=True)
data = open({source!r}, "rb").read()
# as npm's tar does: the final path, opened with the entry's mode (executable from the first byte), written in place
fd = os.open(os.path.join(folder, "opencode"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
for i in range(0, len(data), 1 << 15):
    os.write(fd, data[i:i + (1 << 15)])
    time.sleep(0.01)
os.close(fd)
"""


@pytest.fixture
def fake_npm(tmp_path, monkeypatch) -> Path:
    """An ``npm`` first on PATH that installs :data:`BINARY` slowly, as npm writes; returns its log (one line a run)."""
    source, log, bin_dir = tmp_path / "binary", tmp_path / "npm.log", tmp_path / "npm-bin"
    source.write_bytes(BINARY)
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM.format(python=sys.executable, log=str(log), package=platform_packages()[0],
                                   source=str(source)))
    npm.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    log.touch()
    return log


async def npm_is_writing(cache: Path) -> Path:
    """The binary npm is writing under ``cache`` (in the prefix or beside it), once its first bytes are there."""
    while True:
        for found in cache.rglob("opencode"):
            if found.parent.name == "bin" and found.is_file() and 0 < found.stat().st_size < len(BINARY):
                return found
        await asyncio.sleep(0.002)


async def test_a_trial_that_starts_while_npm_writes_opencode_gets_it_whole(tmp_path, fake_npm):
    cache = tmp_path / "cache"
    first = asyncio.create_task(ensure_installed(cache_dir=cache))  # the first trial installs
    await asyncio.wait_for(npm_is_writing(cache), 30)
    later = await ensure_installed(cache_dir=cache)  # a trial that starts now
    assert later.binary.read_bytes() == BINARY, "a trial was given a binary npm was still writing"
    assert (later.shipped / "opencode").read_bytes() == BINARY
    assert (await first).shipped == later.shipped
    assert len(fake_npm.read_text().splitlines()) == 1  # one install for both


async def test_a_reinstall_never_rewrites_a_file_a_running_opencode_maps(tmp_path, fake_npm):
    cache = tmp_path / "cache"
    installed = await ensure_installed(cache_dir=cache)
    shipped = installed.shipped / "opencode"
    # The npm prefix stops looking whole (a half-cleaned cache), and a process killed mid-install left its staging
    # folder; trials are running OpenCode: each file they may map is held open here.
    installed.binary.chmod(0o644)
    (cache / f".{DEFAULT_VERSION}.installing-left").mkdir()
    held = {path: os.open(path, os.O_RDONLY) for path in (installed.binary, shipped)}
    before = {path: os.fstat(fd) for path, fd in held.items()}
    try:
        # The next two trials, at once, install again.
        again = await asyncio.gather(ensure_installed(cache_dir=cache), ensure_installed(cache_dir=cache))
        assert len(fake_npm.read_text().splitlines()) == 2  # the first install and one reinstall
        for path, fd in held.items():
            now = os.fstat(fd)
            assert (now.st_mtime_ns, now.st_size) == (before[path].st_mtime_ns, before[path].st_size), \
                f"{path} was rewritten while a trial held it"
            assert os.pread(fd, len(BINARY) + 1, 0) == BINARY
        assert os.stat(shipped).st_ino == before[shipped].st_ino  # what the sandboxes bind stays the same file
        assert {a.shipped for a in again} == {installed.shipped}
        assert all(a.binary.read_bytes() == BINARY and os.access(a.binary, os.X_OK) for a in again)
        assert not list(cache.glob(f".{DEFAULT_VERSION}.installing-*")) and not list(cache.glob(f".{DEFAULT_VERSION}.old-*"))
    finally:
        for fd in held.values():
            os.close(fd)


def recorded(upload, into: list[str]):
    """``upload``, noting each destination in ``into``."""

    async def wrapped(source, dest, **kwargs):
        into.append(dest)
        return await upload(source, dest, **kwargs)

    return wrapped


def digest(folder: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_mode, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(folder.iterdir())}


async def test_the_local_sandbox_binds_opencode_read_only_and_uploads_nothing(tmp_path, opencode_install):
    task = load_task(Path(__file__).resolve().parents[4] / "examples" / "tasks" / "hello-file")
    shipped = digest(opencode_install.shipped)
    provider = LocalSandboxProvider()
    for n in range(2):  # the second trial finds the host folder as it was
        harness = OpenCodeHarness({})
        spec = sandbox_spec(task, f"opencode-bound-{n}")
        spec = spec.model_copy(update={"mounts": await harness.mounts(task)})
        assert spec.mounts == {"/mnt/tackroom-opencode": opencode_install.shipped}
        box = provider.create(spec)
        await box.start()
        uploads: list[str] = []
        box.upload = recorded(box.upload, uploads)  # type: ignore[method-assign]
        try:
            await harness.setup(box, task)
            assert harness.bin_dir == "/mnt/tackroom-opencode"
            assert not any(dest.endswith(("/opencode", "/rg")) for dest in uploads), uploads
            seen = await box.exec("ls /mnt/tackroom-opencode; test -e /opt/opencode/bin && echo copied; "
                                  "/mnt/tackroom-opencode/rg --version | head -1")
            assert seen.stdout.split()[:2] == ["opencode", "rg"] and "copied" not in seen.stdout
            assert "ripgrep" in seen.stdout
            # The agent cannot change what the next trial runs.
            for attack in ("echo x > /mnt/tackroom-opencode/opencode", "rm -f /mnt/tackroom-opencode/rg",
                           "touch /mnt/tackroom-opencode/new", "chmod 777 /mnt/tackroom-opencode/opencode",
                           "mv /mnt/tackroom-opencode/rg /tmp/rg"):
                assert not (await box.exec(attack)).ok, attack
        finally:
            await box.stop()
        assert digest(opencode_install.shipped) == shipped
