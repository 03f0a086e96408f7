"""Network allowlists on the ``local`` sandbox (``network_mode = "allowlist"``): a real bubblewrap sandbox whose
own network namespace holds only ``lo`` and the egress proxy's port (tackroom_sandbox_kit.egress), real HTTP
servers on this host, real clients inside (curl, python, bash's /dev/tcp). The agent plays hostile: it unsets the
proxy variables and opens raw sockets. Names reach the servers through the provider's ``egress_hosts`` table, the
test's own resolver table (this machine's DNS is not the test's to change)."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

import tackroom
import tackroom_app
from tackroom import NetworkPolicy, Trial
from tackroom_app import TrialPlugins, TrialRuntime
from tackroom_local import LocalSandbox, LocalSandboxProvider

TABLE = {"mirror.test": "127.0.0.5", "grading.test": "127.0.0.6", "other.test": "127.0.0.5"}
"""The operator's table: both servers on the host's loopback, which no task's list or DNS answer can open."""


def allow(*hosts: str) -> NetworkPolicy:
    return NetworkPolicy(mode="allowlist", allowed_hosts=hosts)


@pytest.fixture
async def servers():
    """HTTP servers on 127.0.0.5 and 127.0.0.6 (one port number, found free on both) answering with their name."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        name = b"mirror" if writer.get_extra_info("sockname")[0] == "127.0.0.5" else b"grading"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n" % (len(name) + 1, name))
        await writer.drain()
        writer.close()

    first = await asyncio.start_server(answer, "127.0.0.5", 0)
    port = first.sockets[0].getsockname()[1]
    second = await asyncio.start_server(answer, "127.0.0.6", port)
    yield port
    first.close()
    second.close()


@pytest.fixture
async def make(tmp_path):
    made: list[LocalSandbox] = []

    async def make(network: NetworkPolicy) -> LocalSandbox:
        provider = LocalSandboxProvider({"root_dir": str(tmp_path / "roots"), "egress_hosts": TABLE})
        sb = provider.create(tackroom.SandboxSpec(name="allowlist", network=network))
        made.append(sb)
        await sb.start()
        return sb

    yield make
    for sb in made:
        await sb.stop()


def fetch(url: str, *extra: str) -> str:
    return f"curl -sS --max-time 10 {' '.join(extra)} {url} 2>&1; echo \" exit=$?\""


HOSTILE = """\
unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy
curl -sS --max-time 5 --noproxy '*' http://127.0.0.5:{port}/ >/dev/null 2>&1 && echo curl-direct
python3 -c 'import socket; socket.create_connection(("127.0.0.5", {port}), 3)' 2>/dev/null && echo python-loopback
python3 -c 'import socket; socket.create_connection(("1.1.1.1", 443), 3)' 2>/dev/null && echo python-internet
(exec 3<>/dev/tcp/127.0.0.6/{port}) 2>/dev/null && echo bash-tcp
getent hosts pypi.org >/dev/null && echo dns
ls /sys/class/net 2>/dev/null || tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '
"""
"""The agent ignores the proxy: every line that reaches something echoes; only the interface list is printed."""


async def test_the_agent_reaches_the_listed_host_through_the_proxy_and_nothing_else(make, servers):
    sb = await make(allow("mirror.test"))
    assert (await sb.exec(fetch(f"http://mirror.test:{servers}/"))).stdout == "mirror\n exit=0\n"
    assert (await sb.exec(fetch(f"http://mirror.test:{servers}/", "-p"))).stdout == "mirror\n exit=0\n"  # CONNECT
    refused = await sb.exec(fetch(f"http://other.test:{servers}/", "-p"))
    assert "403" in refused.stdout and "exit=56" in refused.stdout, refused
    plain = (await sb.exec(fetch(f"http://grading.test:{servers}/"))).stdout
    assert plain == "tackroom egress proxy: host 'grading.test' is not in the task's allowed_hosts\n exit=0\n"
    hostile = await sb.exec(HOSTILE.format(port=servers))
    assert hostile.stdout.split() == ["lo"], f"the agent reached something past the proxy: {hostile.stdout}"


async def test_grading_gets_its_own_allowlist_and_going_offline_leaves_no_proxy(make, servers, tmp_path):
    sb = await make(allow("mirror.test"))
    await sb.kill_processes()
    await sb.set_network(allow("grading.test"))
    script = (fetch(f"http://grading.test:{servers}/", "-p") + "; " + fetch(f"http://mirror.test:{servers}/", "-p")
              + "; " + HOSTILE.format(port=servers))
    result = await sb.run_grader(["bash", "-c", script], private=["/tests", "/logs/verifier"], collect="/logs/verifier",
                                 dest=tmp_path / "reward")
    said = result.stdout.splitlines()
    assert said[:2] == ["grading", " exit=0"], result
    assert "403" in said[2] and said[3:] == [" exit=56", "lo"], result
    # the verifier's other commands of the phase get the same list
    assert (await sb.exec(fetch(f"http://grading.test:{servers}/"))).stdout == "grading\n exit=0\n"
    await sb.set_network(NetworkPolicy(mode="none"))
    offline = await sb.exec(fetch(f"http://grading.test:{servers}/"))
    assert offline.stdout == "curl: (6) Could not resolve host: grading.test\n exit=6\n", offline  # no proxy left


async def test_a_kept_service_stays_and_the_grader_reaches_its_allowlist_beside_it(make, servers, tmp_path):
    sb = await make(NetworkPolicy(mode="none"))
    await sb.exec("nohup python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1")
    assert len(await sb.kill_processes(keep_listening=True)) == 1
    await sb.set_network(allow("grading.test"))
    script = fetch(f"http://grading.test:{servers}/", "-p") + "; " + fetch("http://127.0.0.1:8080/", "-o /dev/null")
    result = await sb.run_grader(["bash", "-c", script], private=["/tests", "/logs/verifier"], collect="/logs/verifier",
                                 dest=tmp_path / "reward")
    assert result.stdout == "grading\n exit=0\n exit=0\n", result


async def test_a_policy_relay_forwarded_into_an_allowlisted_sandbox_is_reached_directly(make):
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\npolicy\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        sb = await make(allow("mirror.test"))
        url = await sb.forward_host_port(server.sockets[0].getsockname()[1])
        # the proxy variables are set (NO_PROXY keeps the sandbox's loopback direct): the relay answers
        assert (await sb.exec(fetch(url + "/v1/models"))).stdout == "policy\n exit=0\n"
    finally:
        server.close()


async def test_a_trial_grades_on_its_allowlist_and_the_agent_cannot_reach_graders_host(tmp_path, servers):
    task_dir = tmp_path / "task"
    for sub in ("tests", "solution"):
        (task_dir / sub).mkdir(parents=True)
    (task_dir / "instruction.md").write_text("fetch what you can")
    (task_dir / "task.toml").write_text(textwrap.dedent("""\
        [agent]
        timeout_sec = 30
        allowed_hosts = ["mirror.test"]
        [verifier]
        timeout_sec = 30
        allowed_hosts = ["grading.test"]
        """))
    (task_dir / "solution" / "solve.sh").write_text(
        f"{{ {fetch(f'http://mirror.test:{servers}/')}; }} > /app/agent.txt\n"
        f"{{ {fetch(f'http://grading.test:{servers}/')}; }} >> /app/agent.txt\n")
    (task_dir / "tests" / "test.sh").write_text(
        f"[ \"$(curl -sS http://grading.test:{servers}/)\" = grading ] && grep -qx mirror /app/agent.txt "
        "&& ! grep -qx grading /app/agent.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    task = tackroom.load_task(task_dir)
    manager = tackroom_app.PluginManager()
    oracle, verifier = manager.get("harness", "oracle"), manager.get("verifier", "test-script")
    trial = Trial(task_id=task.id, task_path=str(task.path), harness="oracle", sandbox="local", verifier="test-script")
    provider = LocalSandboxProvider({"root_dir": str(tmp_path / "roots"), "egress_hosts": TABLE})
    plugins = TrialPlugins(oracle, oracle.Options(), provider, verifier, verifier.Options())
    result = await TrialRuntime(tmp_path / "run", progress=False, manager=manager).run_trial(trial, task, plugins)
    assert result.error is None and result.reward == 1.0, (result.notes, result.reward_details)
    assert any("allowlist refused 1 connection(s): host 'grading.test'" in n for n in result.notes), result.notes


def test_the_provider_declares_that_it_enforces_allowlists():
    assert "network_allowlist" in LocalSandboxProvider.capabilities  # what the runtime asks; the tests above keep it
