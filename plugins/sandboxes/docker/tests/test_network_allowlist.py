"""Network allowlists on the docker sandbox: a real container on ``--network none`` whose namespace holds only
``lo`` and the egress proxy's port (tackroom_sandbox_kit.egress), real HTTP servers on this host, bash's /dev/tcp
inside (the slim image has no curl). The agent plays hostile: it unsets the proxy variables and dials addresses
itself. Names reach the servers through the provider's ``egress_hosts`` table (the test's own resolver table)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tackroom import NetworkPolicy, SandboxSpec
from tackroom_docker import DockerProvider
from tackroom_docker.sandbox import DockerSandbox

docker = pytest.mark.docker
TABLE = {"mirror.test": "127.0.0.5", "grading.test": "127.0.0.6", "other.test": "127.0.0.5"}

GET = r"""
get() {  # an absolute-form GET through the phase's proxy; prints the status line's code, then the body
    p=${HTTP_PROXY#http://}; p=${p%/}
    exec 3<>"/dev/tcp/${p%:*}/${p##*:}" || { echo no-proxy; return; }
    printf 'GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" "$1" >&3
    read -r _ code _ <&3; echo "$code"
    sed -n '/^\r$/,$p' <&3 | tail -n +2
    exec 3<&-
}
"""
HOSTILE = r"""
unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy
(exec 3<>/dev/tcp/127.0.0.5/{port}) 2>/dev/null && echo loopback
(exec 3<>/dev/tcp/1.1.1.1/443) 2>/dev/null && echo internet
getent hosts pypi.org >/dev/null && echo dns
tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '
"""


def allow(*hosts: str) -> NetworkPolicy:
    return NetworkPolicy(mode="allowlist", allowed_hosts=hosts)


@pytest.fixture
async def servers():
    """HTTP servers on 127.0.0.5 and 127.0.0.6 (one port number) answering with their name."""

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
async def make(base_image):
    made: list[DockerSandbox] = []

    async def make(network: NetworkPolicy) -> DockerSandbox:
        sb = DockerProvider({"egress_hosts": TABLE}).create(SandboxSpec(name=f"allow-{uuid.uuid4().hex[:8]}",
                                                                         network=network))
        made.append(sb)
        await sb.start()
        return sb

    yield make
    for sb in made:
        await sb.stop()


@docker
async def test_the_agent_reaches_the_listed_host_through_the_proxy_and_nothing_else(make, servers, tmp_path):
    sb = await make(allow("mirror.test"))
    said = await sb.exec(f"{GET}\nget mirror.test:{servers}; get other.test:{servers}")
    assert said.stdout.replace("\r", "").split("\n")[:3] == ["200", "mirror", "403"], said
    hostile = await sb.exec(HOSTILE.format(port=servers))
    assert hostile.stdout.split() == ["lo"], f"the agent reached something past the proxy: {hostile.stdout}"
    # grading gets its own list; the agent's is gone
    await sb.kill_processes()
    await sb.set_network(allow("grading.test"))
    for folder in ("/tests", "/logs/verifier"):
        await sb.fresh_folder(folder)
    result = await sb.run_grader(["bash", "-c", f"{GET}\nget grading.test:{servers}; get mirror.test:{servers}\n"
                                  + HOSTILE.format(port=servers)],
                                 private=["/tests", "/logs/verifier"], collect="/logs/verifier", dest=tmp_path / "r")
    assert result.stdout.replace("\r", "").split() == ["200", "grading", "403", *(
        "tackroom egress proxy: host 'mirror.test' is not in the task's allowed_hosts".split()), "lo"], result
    assert any("refused 1 connection(s): host 'other.test'" in n for n in sb.notes), sb.notes


@docker
async def test_a_policy_relay_forwarded_into_an_allowlisted_container_is_reached_directly(make):
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"policy\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        sb = await make(allow("mirror.test"))
        url = await sb.forward_host_port(server.sockets[0].getsockname()[1])
        port = url.rsplit(":", 1)[1]
        assert (await sb.exec(f"exec 3<>/dev/tcp/127.0.0.1/{port} && cat <&3")).stdout == "policy\n"
    finally:
        server.close()


def test_the_provider_declares_that_it_enforces_allowlists():
    assert "network_allowlist" in DockerProvider.capabilities  # what the runtime asks; the tests above keep it
