"""The exec wrapper script run by real bash: streams split, stdin, env, cwd, timeout kills the group, capping."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tackroom_daytona.sandbox import KILLED, wrapper


def gone(pid: int) -> bool:
    """Exited: no /proc entry, or a zombie not yet reaped (the entry can vanish between two reads)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def run(tmp_path: Path, cmd: str | list[str], *, stdin: bytes | None = None, timeout: float = 10, limit: int = 1000, **kw) -> tuple[int, str, bytes, bytes, bool]:  # type: ignore[no-untyped-def]
    base = str(tmp_path / "x")
    if stdin is not None:
        Path(f"{base}.in").write_bytes(stdin)
    script = wrapper(base, cmd, cwd=kw.get("cwd"), env=kw.get("env", {}), timeout=timeout, stdin=stdin is not None, limit=limit)
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, Path(f"{base}.out").read_bytes(), Path(f"{base}.err").read_bytes(), Path(f"{base}.timeout").exists()


def test_streams_env_cwd_stdin(tmp_path: Path) -> None:
    tricky = "two words $HOME 'q' \"dq\" ;|&"
    rc, printed, out, err, _ = run(tmp_path, 'echo out; echo err >&2; printf %s "$V"; pwd; cat; exit 3',
                                   env={"V": tricky}, cwd="/", stdin=b"IN")
    assert (rc, out, err, printed) == (3, f"out\n{tricky}/\nIN".encode(), b"err\n", "")


def test_list_command_is_not_shell_split(tmp_path: Path) -> None:
    assert run(tmp_path, ["printf", "%s|", "two words", "$HOME"])[2] == b"two words|$HOME|"


def test_no_stdin_means_eof(tmp_path: Path) -> None:
    assert run(tmp_path, "cat; echo done")[2] == b"done\n"


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    started = time.monotonic()
    rc, _, _, _, timed_out = run(tmp_path, f"sleep 600 & echo $! > {pids}; exec sleep 600", timeout=1)
    assert rc == KILLED and timed_out and time.monotonic() - started < 5
    time.sleep(0.2)
    for pid in pids.read_text().split():
        assert gone(int(pid))


def test_output_is_capped(tmp_path: Path) -> None:
    rc, printed, out, _, _ = run(tmp_path, "head -c 5000 /dev/zero | tr '\\0' a", limit=100)
    assert rc == 0 and printed == "TRUNCATED\n" and out == b"a" * 100
