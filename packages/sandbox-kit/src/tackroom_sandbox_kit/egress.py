"""A network allowlist for a sandbox that has no network of its own: an egress proxy in tackroom's process.

``network_mode = "allowlist"`` (Harbor's task key, with ``allowed_hosts``) gives a phase of a trial only the hosts
the task lists. The sandbox keeps an empty network namespace (loopback only, as with ``none``); a short-lived
helper opens one listening socket on its ``127.0.0.1`` (:func:`~tackroom_sandbox_kit.host_forward.listen_in_namespace`,
the port picked by the kernel so nothing the agent left listening can stand in for it), and tackroom serves an HTTP
proxy on it: ``CONNECT host:port`` (HTTPS and any other TCP) and plain ``http://`` requests. The proxy resolves
names itself and connects only where :class:`EgressRules` allow; the sandbox's environment points
``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` (and their lower-case forms) at it for the phase, with
``NO_PROXY`` covering the sandbox's own loopback (where a harness's policy relay listens).

It is proxy-based, so fail-closed: a program that ignores the proxy variables (or unsets them, or opens a raw
socket) reaches nothing, because the namespace has no route out; nothing of the proxy runs inside the sandbox.

What an ``allowed_hosts`` entry means (Harbor's: host names or IP addresses, any port; plus wildcards and CIDRs):

- ``pypi.org``: that name only (not its subdomains);
- ``*.pythonhosted.org``: every name below it, at any depth (not ``pythonhosted.org`` itself: list both for both);
- ``203.0.113.7`` / ``203.0.113.0/24`` (IPv4 or IPv6): a destination given as an address inside it.

A name not listed is refused without being resolved (no DNS query leaves for it: DNS is answered for allowed names
only); an address is reached only when the request names it and it is listed. Addresses a listed name resolves to
through DNS are used unless they are the host's loopback, link-local (cloud metadata), unspecified or multicast: a
DNS answer (a rebinding domain) never opens the host's own services to the sandbox, and neither does a listed
loopback address. Only the operator's own table (``hosts``: a sandbox option, like docker's ``--add-host``) may
point a name there, e.g. at a local mirror.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

from tackroom import NetworkPolicy
from tackroom_sandbox_kit.host_forward import SandboxListener, listen_in_namespace, pipe

HEAD_LIMIT = 64 * 1024
"""The most a request's head (request line and headers) may hold."""
HEAD_TIMEOUT = 30.0
CONNECT_TIMEOUT = 30.0
NO_PROXY = "localhost,127.0.0.1,::1"
"""The sandbox's own loopback stays direct: a forwarded policy relay (``Sandbox.forward_host_port``) listens there."""
REFUSED_KEPT = 50
"""How many refused destinations a proxy remembers (for the trial's notes)."""

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class EgressRefused(Exception):
    """A destination the rules do not allow (answered 403), or one that cannot be reached (502)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


def _address(text: str) -> IPAddress | None:
    try:
        ip = ipaddress.ip_address(text.strip("[]").split("%")[0])
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


def host_side(ip: IPAddress) -> bool:
    """Whether ``ip`` reaches the host itself or what only the host should (loopback, link-local such as cloud
    metadata, unspecified, multicast): never a destination a task's allowlist or a DNS answer can open."""
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast


class EgressRules:
    """What one phase may reach: :attr:`NetworkPolicy.allowed_hosts` read as names, ``*.`` suffixes and networks
    (see the module docstring), plus the operator's ``hosts`` table (name → address, trusted, looked up first)."""

    def __init__(self, allowed_hosts: tuple[str, ...] | list[str], hosts: Mapping[str, str] | None = None) -> None:
        self.names: set[str] = set()
        self.suffixes: list[str] = []
        self.networks: list[IPNetwork] = []
        for entry in allowed_hosts:
            entry = entry.strip().lower().rstrip(".")
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("*."):
                self.suffixes.append(entry[1:])  # ".example.com"
            elif entry and "*" not in entry:
                self.names.add(entry)
            else:
                raise ValueError(f"allowed_hosts entry {entry!r}: a wildcard only as a leading '*.'")
        self.hosts = {k.lower().rstrip("."): v for k, v in (hosts or {}).items()}
        for name, addr in self.hosts.items():
            if _address(addr) is None:
                raise ValueError(f"egress hosts table: {name} = {addr!r} is not an IP address")

    @classmethod
    def for_policy(cls, policy: NetworkPolicy, hosts: Mapping[str, str] | None = None) -> EgressRules:
        """The rules of an ``allowlist`` policy (any other mode has no proxy: a :class:`ValueError`)."""
        if policy.mode != "allowlist":
            raise ValueError(f"an egress proxy enforces network mode 'allowlist', not {policy.mode!r}")
        return cls(policy.allowed_hosts, hosts)

    def allows_name(self, name: str) -> bool:
        name = name.lower().rstrip(".")
        return name in self.names or any(name.endswith(s) and len(name) > len(s) for s in self.suffixes)

    def allows_address(self, ip: IPAddress) -> bool:
        return not host_side(ip) and any(ip.version == n.version and ip in n for n in self.networks)

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for ``host``, or :class:`EgressRefused` saying why there are none."""
        host = host.strip().lower().rstrip(".")
        if (ip := _address(host)) is not None:
            if not self.allows_address(ip):
                why = "the host's own or link-local" if host_side(ip) else "not in the task's allowed_hosts"
                raise EgressRefused(f"address {ip} is {why}")
            return [str(ip)]
        if not self.allows_name(host):
            raise EgressRefused(f"host {host!r} is not in the task's allowed_hosts")
        if host in self.hosts:  # the operator's table: trusted as it is
            return [self.hosts[host]]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise EgressRefused(f"host {host!r} could not be resolved: {exc}", 502) from None
        found = list(dict.fromkeys(str(info[4][0]) for info in infos))
        usable = [a for a in found if (ip := _address(a)) is not None and not host_side(ip)]
        if not usable:
            raise EgressRefused(f"host {host!r} resolves only to the host's own or link-local addresses {found}")
        return usable


def proxy_env(port: int) -> dict[str, str]:
    """The variables that send a sandbox's HTTP(S) clients (curl, pip, uv, apt, npm, git, requests) through the
    proxy on its ``127.0.0.1:port``; the sandbox's own loopback stays direct."""
    url = f"http://127.0.0.1:{port}"
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    env |= {name.lower(): url for name in env} | {"NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}
    return env


def _split_authority(authority: str) -> tuple[str, int]:
    host, sep, port = authority.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise EgressRefused(f"CONNECT needs host:port, not {authority!r}", 400)
    return host.strip("[]"), int(port)


class EgressProxy(SandboxListener):
    """Serves the HTTP proxy on ``listener`` (a socket inside a sandbox) under ``rules``; :meth:`close` ends it and
    every connection made through it. :attr:`refused` keeps the destinations it refused, for the trial's notes."""

    read_limit = HEAD_LIMIT

    def __init__(self, listener: socket.socket, rules: EgressRules) -> None:
        super().__init__(listener)
        self.rules = rules
        self.refused: list[str] = []

    @property
    def env(self) -> dict[str, str]:
        """:func:`proxy_env` for this proxy's port."""
        return proxy_env(self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
                return
            try:
                up_reader, upstream, first = await self._open(head)
            except EgressRefused as exc:
                if exc.status == 403 and len(self.refused) < REFUSED_KEPT:
                    self.refused.append(str(exc))
                reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[exc.status]
                body = f"tackroom egress proxy: {exc}\n".encode()
                writer.write(f"HTTP/1.1 {exc.status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: "
                             f"{len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
                with contextlib.suppress(OSError):
                    await writer.drain()
                return
            if first is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.write(first)
            await asyncio.gather(pipe(reader, upstream), pipe(up_reader, writer))
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    async def _open(self, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes | None]:
        """Connect where the request asks, if allowed; the bytes to send upstream first (None for CONNECT)."""
        request, *headers = head.decode("latin-1").split("\r\n")
        parts = request.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise EgressRefused(f"not an HTTP proxy request: {request[:100]!r}", 400)
        method, target, version = parts
        first: bytes | None = None
        if method.upper() == "CONNECT":
            host, port = _split_authority(target)
        else:
            url = urlsplit(target)
            if url.scheme.lower() != "http" or not url.hostname:
                raise EgressRefused(f"a proxied request needs an absolute http:// URL, not {target[:100]!r} "
                                    "(https goes through CONNECT)", 400)
            try:
                host, port = url.hostname, url.port or 80
            except ValueError:
                raise EgressRefused(f"bad port in {target[:100]!r}", 400) from None
            kept = [h for h in headers if h and not h.lower().startswith(("proxy-connection:", "proxy-authorization:"))]
            origin = (url.path or "/") + (f"?{url.query}" if url.query else "")
            first = "\r\n".join([f"{method} {origin} {version}", *kept, "", ""]).encode("latin-1")
        addresses = await self.rules.resolve(host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                up_reader, upstream = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_TIMEOUT)
                return up_reader, upstream, first
            except (OSError, TimeoutError) as exc:
                last = exc
        raise EgressRefused(f"could not connect to {host}:{port}: {last}", 502)


async def serve_egress(pid: int, policy: NetworkPolicy, *, enter_user: bool,
                       hosts: Mapping[str, str] | None = None) -> EgressProxy:
    """An :class:`EgressProxy` for ``policy`` on a port the kernel picks inside ``pid``'s network namespace (see
    :func:`~tackroom_sandbox_kit.host_forward.listen_in_namespace` for ``enter_user``); close it when done."""
    rules = EgressRules.for_policy(policy, hosts)
    listener = await asyncio.to_thread(listen_in_namespace, pid, 0, enter_user=enter_user)
    return await EgressProxy(listener, rules).start()
