"""The world gateway binds a port the kernel picks (port 0) and reports it, so no port chosen in advance can be
taken by the time it binds (on a host-network sandbox, by any listener or outgoing connection); the relay finds
it through the gateway's port file."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from archipelago_paths import TASKS
from archipelago_scripted_engine import ScriptedEngine
from test_world_builds import trial

from tackroom import Policy, load_task
from tackroom_app import sandbox_spec
from tackroom_archipelago import ArchipelagoHarness
from tackroom_archipelago.world import start_gateway
from tackroom_local import LocalSandboxProvider

RELAY = Path(__file__).resolve().parents[1] / "src" / "tackroom_archipelago" / "sandbox_side" / "http_relay.py"


def load_relay():
    spec = importlib.util.spec_from_file_location("http_relay_under_test", RELAY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def test_the_relay_waits_for_the_port_file_then_asks_that_port(tmp_path):
    relay = load_relay()
    port_file = tmp_path / "gateway.port"
    pid_file = tmp_path / "gateway.pid"
    pid_file.write_text(str(__import__("os").getpid()))
    req = {"method": "GET", "path": "/health", "headers": [], "body": "", "port": 0, "port_file": str(port_file)}
    assert relay.port_of(req) is None
    assert "not written its port" in relay.ask(req, timeout=1)["error"]
    server = HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        timer = threading.Timer(0.3, lambda: port_file.write_text(str(server.server_address[1])))
        timer.start()
        out = relay.wait(req, str(pid_file), seconds=10)
        assert out.get("status") == 200, out
    finally:
        server.shutdown()


async def test_a_trials_gateway_reports_the_port_the_kernel_gave_it():
    task = load_task(TASKS / "q3-revenue-by-region")
    harness, _ = await trial(task, ["Done."])
    assert 0 < harness.gateway.port < 65536


async def test_two_gateways_in_one_sandbox_listen_on_their_own_ports_while_a_port_is_held():
    """A second gateway started in the same sandbox gets a port of its own, and the port file it reads is its own
    (the first one's is removed before it starts, so a stale one is never asked)."""
    task = load_task(TASKS / "q3-revenue-by-region")
    harness = ArchipelagoHarness({"max_steps": 2})
    spec = sandbox_spec(task, "archipelago-port")
    box = LocalSandboxProvider().create(spec.model_copy(update={"mounts": await harness.mounts(task)}))
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    await box.start()
    try:
        await harness.setup(box, task)
        first = harness.gateway
        second = await start_gateway(box, harness.world, harness.layout, timeout=120)
        assert first.port != second.port and held.getsockname()[1] not in (first.port, second.port)
        written = await box.exec(["cat", f"{second.base}/gateway.port"], timeout=30)
        assert int(written.stdout) == second.port
        for handle in (first, second):
            asked = await box.exec([handle.python, handle.relay], timeout=60, stdin=json.dumps(
                {"method": "GET", "path": "/health", "headers": [], "body": "", "port": handle.port}))
            assert json.loads(asked.stdout)["status"] == 200, asked.stdout
        async with ScriptedEngine(["Done."]) as engine:
            await asyncio.wait_for(harness.run(task, box, Policy(base_url=engine.url, model="scripted")), 120)
    finally:
        held.close()
        await box.stop()
