"""The egress proxy local and docker serve a network allowlist with (tackroom_sandbox_kit.egress), driven by a real
client (curl) against real HTTP servers on this host: what an ``allowed_hosts`` entry lets through, what it does
not, and that a refused name is never resolved. Inside real sandboxes (no route but the proxy, per phase, an agent
that unsets the variables) it is checked by the local and docker allowlist tests."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
import socket

import pytest

from tackroom import NetworkPolicy, SandboxError
from tackroom_sandbox_kit import EgressProxy, EgressRefused, EgressRules, NamespacePorts, proxy_env

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="the tests drive the proxy with curl")


def own_address() -> str | None:
    """This host's address on its default route (a non-loopback destination for CIDR entries), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # no packet is sent: connect on UDP only picks the route
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if ipaddress.ip_address(address).is_loopback else address


async def answering(host: str, name: str) -> tuple[asyncio.Server, int]:
    """An HTTP server on ``host`` that answers every request with ``name`` (and the path it was asked)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")[0]
        body = f"{name} {request.split(' ')[1]}\n".encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, host, 0)
    return server, server.sockets[0].getsockname()[1]


async def curl(proxy_port: int, url: str, *, tunnel: bool = False) -> tuple[int, str, str]:
    """curl ``url`` through the proxy (``tunnel``: with CONNECT, as for https); exit code, body, stderr."""
    proc = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--max-time", "20", "-x", f"http://127.0.0.1:{proxy_port}", *(["-p"] if tunnel else []), url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
async def proxy_for():
    """Serve an EgressProxy for given allowed_hosts (and operator table) on this host's 127.0.0.1."""
    proxies: list[EgressProxy] = []

    async def start(*allowed: str, hosts: dict[str, str] | None = None) -> EgressProxy:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        proxy = await EgressProxy(listener, EgressRules(allowed, hosts)).start()
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        await proxy.close()


async def test_a_listed_name_is_reached_over_http_and_connect_and_an_unlisted_one_is_refused(proxy_for):
    server, port = await answering("127.0.0.5", "mirror")
    try:
        proxy = await proxy_for("mirror.test", hosts={"mirror.test": "127.0.0.5", "other.test": "127.0.0.5"})
        assert await curl(proxy.port, f"http://mirror.test:{port}/simple/?q=1") == (0, "mirror /simple/?q=1\n", "")
        code, body, _ = await curl(proxy.port, f"http://mirror.test:{port}/x", tunnel=True)
        assert (code, body) == (0, "mirror /x\n")
        # the same server under a name the task does not list (the operator's table knows it): refused
        code, body, err = await curl(proxy.port, f"http://other.test:{port}/")  # curl prints the 403's body
        assert body == "tackroom egress proxy: host 'other.test' is not in the task's allowed_hosts\n", (code, err)
        code, _, err = await curl(proxy.port, f"http://other.test:{port}/", tunnel=True)
        assert code != 0 and "403" in err, err
        assert proxy.refused == ["host 'other.test' is not in the task's allowed_hosts"] * 2
    finally:
        server.close()


async def test_a_wildcard_reaches_the_names_below_it_and_not_the_name_itself():
    rules = EgressRules(["*.pythonhosted.org", "pypi.org"])
    assert rules.allows_name("files.pythonhosted.org") and rules.allows_name("a.b.pythonhosted.org")
    assert not rules.allows_name("pythonhosted.org") and not rules.allows_name("evilpythonhosted.org")
    assert rules.allows_name("PyPI.org.") and not rules.allows_name("www.pypi.org")


async def test_a_name_not_listed_is_refused_without_being_resolved(monkeypatch):
    asked: list[str] = []
    loop = asyncio.get_running_loop()

    async def getaddrinfo(host, *args, **kwargs):
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("203.0.113.9", 443))]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    rules = EgressRules(["pypi.org"])
    with pytest.raises(EgressRefused, match="'exfil.attacker.example' is not in the task's allowed_hosts"):
        await rules.resolve("exfil.attacker.example", 443)
    assert asked == [], "a name the task does not list was sent to DNS"
    assert await rules.resolve("pypi.org", 443) == ["203.0.113.9"] and asked == ["pypi.org"]


async def test_a_dns_answer_or_a_listed_address_never_opens_the_host_itself():
    rules = EgressRules(["localhost", "127.0.0.0/8", "169.254.169.254", "0.0.0.0/0"])
    with pytest.raises(EgressRefused, match="only to the host's own or link-local"):
        await rules.resolve("localhost", 80)  # /etc/hosts: 127.0.0.1 (and ::1)
    for address in ("127.0.0.1", "169.254.169.254", "::ffff:127.0.0.1", "0.0.0.0"):
        with pytest.raises(EgressRefused, match="the host's own or link-local"):
            await rules.resolve(address, 80)
    assert await EgressRules(["db.test"], {"db.test": "127.0.0.1"}).resolve("db.test", 80) == ["127.0.0.1"]


@pytest.mark.skipif(own_address() is None, reason="this host has no non-loopback address")
async def test_an_address_inside_a_listed_cidr_is_reached_and_one_outside_it_is_not(proxy_for):
    address = own_address()
    assert address is not None
    server, port = await answering(address, "inside")
    try:
        network = ipaddress.ip_network(f"{address}/24", strict=False)
        proxy = await proxy_for(str(network))
        assert await curl(proxy.port, f"http://{address}:{port}/") == (0, "inside /\n", "")
        # the other half of that /24: the address is outside the CIDR
        other = next(n for n in network.subnets(prefixlen_diff=1) if ipaddress.ip_address(address) not in n)
        proxy = await proxy_for(str(other))
        code, _, err = await curl(proxy.port, f"http://{address}:{port}/", tunnel=True)
        assert code != 0 and "403" in err, err
        assert proxy.refused == [f"address {address} is not in the task's allowed_hosts"]
    finally:
        server.close()


async def test_what_is_not_a_proxy_request_is_answered_400_and_nothing_is_connected(proxy_for):
    proxy = await proxy_for("pypi.org")
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"GET /relative HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
    assert (await asyncio.wait_for(reader.readline(), 10)).startswith(b"HTTP/1.1 400 ")
    writer.close()
    assert proxy.refused == []  # a malformed request is not a refused destination


def test_the_variables_send_every_scheme_through_the_proxy_and_keep_loopback_direct():
    env = proxy_env(41234)
    assert {env[k] for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")} == {
        "http://127.0.0.1:41234"}
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"


async def test_the_part_serves_only_allowlists_and_notes_what_it_refused():
    sandbox = NamespacePorts(NetworkPolicy(mode="none"), notes=[], enter_user=False)
    await sandbox.serve(os.getpid())
    assert sandbox.env == {}
    if os.geteuid() != 0:
        pytest.skip("entering a network namespace by pid needs root (CAP_SYS_ADMIN)")
    sandbox.policy = NetworkPolicy(mode="allowlist", allowed_hosts=("pypi.org",))
    await sandbox.serve(os.getpid())
    port = int(sandbox.env["HTTPS_PROXY"].rsplit(":", 1)[1])
    code, _, err = await curl(port, "http://not-listed.invalid/", tunnel=True)
    assert code != 0 and "403" in err
    await sandbox.close_egress()
    assert sandbox.env == {}
    assert sandbox.notes == ["the network allowlist refused 1 connection(s): host 'not-listed.invalid' is not in the "
                             "task's allowed_hosts"]
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    with pytest.raises(SandboxError, match="could not open a port inside the sandbox's network namespace"):
        gone = await asyncio.create_subprocess_exec("true")
        await gone.wait()
        await sandbox.serve(gone.pid)
