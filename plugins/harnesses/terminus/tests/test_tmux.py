"""The tmux session on the real local sandbox: typing, keys, paste buffers, incremental output, caps."""

import asyncio

from tackroom_terminus.tmux import TmuxSession, cap_output, is_key_name


async def settle(session, want, tries=40):
    """Observe until ``want`` shows up (commands finish a moment after the keys are typed)."""
    seen = ""
    for _ in range(tries):
        await asyncio.sleep(0.1)
        seen = await session.history()
        if want in seen:
            return
    raise AssertionError(f"{want!r} never appeared; history ends with {seen[-300:]!r}")


def test_key_names_versus_text():
    for key in ("C-c", "C-d", "M-x", "Escape", "Enter", "Up", "Tab", "F5", "C-M-a", "S-Left"):
        assert is_key_name(key), key
    for text in ("ls", "C-c\n", "echo C-c", "Enter the dragon", "c-c", "", "F13"):
        assert not is_key_name(text), text


def test_cap_keeps_head_and_tail_with_a_marker():
    text = "".join(f"line {i}\n" for i in range(5000))
    capped = cap_output(text, 1000)
    assert len(capped.encode()) < 1200
    assert capped.startswith("line 0\n") and capped.rstrip().endswith("line 4999")
    assert "[... output limited to 1000 bytes;" in capped and "interior bytes omitted ...]" in capped
    assert cap_output("short", 1000) == "short"
    assert "omitted" in cap_output("é" * 2000, 101), "multi-byte text is cut on character boundaries"


async def test_typing_keys_and_incremental_output(local_sandbox):
    session = TmuxSession(local_sandbox, width=120, height=30)
    await session.start()
    first = await session.observe()
    assert not first.incremental and first.render().startswith("Current terminal screen:")
    await session.send("echo one-$((40+2))\n")
    await settle(session, "one-42")
    new = await session.observe()
    assert new.incremental and new.render().startswith("New terminal output:")
    lines = str(new).splitlines()
    assert lines[0].endswith("echo one-$((40+2))") and "one-42" in lines, lines
    await session.send("echo two\n")
    await settle(session, "two\n")
    again = str(await session.observe())
    assert "one-42" not in again and "two" in again, "only output since the last observation is shown"

    await session.send("sleep 300\n")
    await asyncio.sleep(0.3)
    await session.send("C-c")
    await session.send("echo after-interrupt\n")
    await settle(session, "after-interrupt\n")
    assert "^C" in str(await session.observe())

    await session.send("clear\n")
    await asyncio.sleep(0.5)
    cleared = await session.observe()
    assert not cleared.incremental, "after clear the history no longer extends what was seen: show the screen"
    assert session.exec_seconds > 0


async def test_long_input_goes_through_a_paste_buffer_exactly(local_sandbox):
    session = TmuxSession(local_sandbox, paste_threshold=64)
    await session.start()
    body = "".join(f"row {i}: it's \"quoted\" $HOME `tick` \\ back\n" for i in range(80))
    await session.send(f"cat > /tmp/pasted.txt <<'EOF'\n{body}EOF\n")
    await settle(session, "row 79")
    for _ in range(40):
        if (await local_sandbox.exec("cat /tmp/pasted.txt", timeout=10)).stdout == body:
            break
        await asyncio.sleep(0.1)
    assert (await local_sandbox.read_file("/tmp/pasted.txt")).decode() == body
    left = await local_sandbox.exec("ls -a /tmp | grep -c '^.tackroom-' || true", timeout=10)
    assert left.stdout.strip() == "0", "the paste file is removed"


async def test_big_output_is_capped_and_dead_session_detected(local_sandbox):
    session = TmuxSession(local_sandbox, output_limit_bytes=2000)
    await session.start()
    await session.observe()
    await session.send("seq 1 3000\n")
    await settle(session, "\n3000\n")
    out = str(await session.observe())
    assert "output limited to 2000 bytes" in out and out.rstrip().endswith("#") and len(out.encode()) < 2300
    assert await session.alive()
    await session.send("exit\n")
    for _ in range(30):
        if not await session.alive():
            break
        await asyncio.sleep(0.1)
    assert not await session.alive()
    await session.start()
    assert await session.alive(), "a session can be started again in the same sandbox"


async def test_a_tmux_server_killed_by_a_signal_mid_run_is_an_infra_error_that_says_so(local_sandbox):
    # terminus's agent binary is tmux (and the shell in it): when it dies mid-run (SIGSEGV, SIGBUS, the OOM
    # killer), the next tmux command fails; that is the machinery's failure (infra, retried), and says what happened.
    from tackroom import SandboxError

    session = TmuxSession(local_sandbox)
    await session.start()
    await session.observe()
    pid = (await local_sandbox.exec(["tmux", "display-message", "-p", "#{pid}"], timeout=30)).stdout.strip()
    assert pid.isdigit(), pid
    await local_sandbox.exec(f"kill -SEGV {pid}", timeout=30)
    for _ in range(50):
        if not await session.alive():
            break
        await asyncio.sleep(0.1)
    try:
        await session.observe()
    except SandboxError as exc:
        assert exc.error_class == "infra"
        assert "the tmux server is gone: it crashed or was killed" in str(exc), str(exc)
    else:
        raise AssertionError("observing a dead tmux server must fail")


async def test_a_tmux_server_the_agent_stopped_is_the_models_failure_within_seconds(local_sandbox):
    """`kill -STOP` on the tmux server (the agent's own command can) left every tmux command hanging to its
    timeout, turn after turn, until the agent timeout; now the first one that does not answer finds the server
    stopped and ends the episode as the model's."""
    import time

    import pytest

    from tackroom import ModelError
    from tackroom_terminus.tmux import TmuxStoppedError

    session = TmuxSession(local_sandbox, width=80, height=24, exec_timeout=120)
    await session.start()
    await session.send("kill -STOP $(tmux display-message -p '#{pid}')\n")
    started = time.monotonic()
    with pytest.raises(TmuxStoppedError, match="the tmux server is stopped") as info:
        for _ in range(3):
            await asyncio.sleep(0.3)
            await session.observe()
    assert isinstance(info.value, ModelError)
    assert time.monotonic() - started < 30, "noticed within seconds, not at the 120 s exec timeout"
    await local_sandbox.exec("for p in $(pgrep tmux); do kill -CONT $p; done; tmux kill-server", timeout=30)
