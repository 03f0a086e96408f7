"""`tackroom train` end to end on one GPU machine that reaches no index: Tinker/JAX backend, archipelago + MCP world.

Issue 39, item 5. The run is `tackroom train` itself (not a re-implementation): `backend = "tinker"`,
`[tinker] sampler = "tinker"` (the Tinker server's own JAX sampler; there is no vLLM on the GPU machine),
the archipelago harness with a world whose files sit behind acme's filesystem MCP server (stdio, the real
SDK), the `local` sandbox (bubblewrap) and the test-script verifier, on three tool-lookup tasks (the answer
is a word in a file the instruction names, never in the instruction). The per-step split (rollout, train,
hand-off) comes from the run's own `steps.jsonl`.

The GPU machine has python3 with torch/jax/transformers but no tackroom, no uv and no package index, and a
call carries at most 64 MiB; a warm machine keeps files between calls. So:

  here:   python3 benchmarks/gpu_train_e2e.py stage .gpu/e2e   # .gpu: git-ignored (.git/info/exclude)
          -> .gpu/e2e/{whl,twhl,site,...} (47 MB): wheels (py3.12 manylinux) of tackroom's packages and their
             missing dependencies, the world's MCP site, the tasks, bwrap + its libraries, SmolLM2's tokenizer
             and config; .gpu/g1, .gpu/g2: the 98 MB GGUF in two parts of 49 MB (one call each)
  there:  mkdir -p /root/stage; cp .gpu/g1/part1 /root/stage/     # call 1, carry .gpu/g1
          cp .gpu/g2/part2 /root/stage/                          # call 2 (within 30 s), carry .gpu/g2
          python3 .gpu/e2e/gpu_train_e2e.py device .gpu/e2e --steps N  # call 3 (within 30 s), carry .gpu/e2e

`device` installs the wheels with `pip --no-index --no-deps --target`, puts a `uv` stand-in on PATH (SkyRL's
API server starts its engine with `uv run <its parent's uv flags> -m skyrl.tinker.engine`; the stand-in runs
`python3 -m ...` as a child, so the API process still sees a `uv run` parent), pre-builds the world's site
(what archipelago would `uv pip install`), converts the GGUF with tackroom-engine's own script, and runs
`tackroom train` under a deadline; what the run wrote (steps.jsonl, summary, logs) is copied to $OUT.
Without both GGUF parts it builds random-init weights of SmolLM2's config instead and says so.

`device --sft FILE` puts an `[sft]` warm start first (examples/train/lookup-bash.toml's settings: 1 epoch, batches
of 8, lr 1e-3) on demonstrations `tackroom collect` wrote (carry them: runs/ is git-ignored) and stops after it
(`<run>/policy`) unless `--then-rl`; its per-step NLL (`sft_steps.jsonl`) then compares with the same warm start on
this CPU.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
STAGE = Path("/root/stage")  # where calls 1 and 2 leave the GGUF parts on the warm machine
TOOLS = ["files_list_directory", "files_read_text_file", "files_search_files"]
WORDS = {"color": "teal", "animal": "otter", "city": "lisbon"}
SITE_REQUIREMENTS = ["mcp>=2.3,<3"]
# The wheels `tackroom train` (tinker backend, archipelago, local sandbox) and SkyRL's Tinker server need
# beyond what the GPU image has (its package list: /work/.library/device/KINDS.md). Versions: this checkout's.
WHEELS = """aiosqlite==0.22.1 annotated-types==0.8.0 anyio==4.16.0 cloudpathlib==0.26.0 dill==0.4.1 distro==1.9.0
dnspython==2.9.2 email-validator==2.4.0 fastapi==0.165.0 flax==0.12.12 googleapis-common-protos==1.76.0
greenlet==3.5.6 h2==4.4.1 hpack==4.2.0 httpx==0.28.1 httpx2==2.16.2 httpcore2==2.16.2 hyperframe==6.1.0
loguru==0.7.3 mcp==2.3.0 mcp-types==2.3.0 omegaconf==2.4.0 opentelemetry-api==1.45.1
opentelemetry-exporter-http-transport==0.66b1 opentelemetry-exporter-otlp-common==0.66b1
opentelemetry-exporter-otlp-proto-common==1.45.1 opentelemetry-exporter-otlp-proto-http==1.45.1
opentelemetry-instrumentation==0.66b1 opentelemetry-instrumentation-aiohttp-client==0.66b1
opentelemetry-proto==1.45.1 opentelemetry-sdk==1.45.1 opentelemetry-semantic-conventions==0.66b1
opentelemetry-util-http==0.66b1 orjson==3.13.0 peft==0.18.1 pybase64==1.5.1 pydantic==2.14.4
pydantic-core==2.50.5 pydantic-extra-types==2.11.1 python-multipart==0.0.34 skyrl==0.4.0 skyrl-gym==0.4.0
sniffio==1.3.1 sqlalchemy==2.1.9 sqlmodel==0.0.50 sse-starlette==3.7.0 starlette==1.10.0 tenacity==9.2.1
tinker==0.25.0 typing-extensions==4.16.0 typing-inspection==0.4.5 uvicorn==0.54.0 watchfiles==1.3.0
zstandard==0.25.0 jsonschema==4.25.1 referencing rpds-py jsonschema-specifications truststore pyqwest gguf
cryptography==50.0.2 cffi==2.1.1 pycparser pyjwt""".split()
PACKAGES = ["core", "packages/app", "packages/worlds", "packages/gateway", "packages/engine", "packages/sandbox-kit",
            "plugins/sandboxes/local", "plugins/harnesses/archipelago", "packages/train", "plugins/losses/losses"]
UV_SHIM = """#!/bin/bash
# Stand-in for uv (benchmarks/gpu_train_e2e.py): `sync` is a no-op (the packages are installed), `run [flags] ARGS`
# runs `python3 ARGS` as a child, so SkyRL's API server still finds `uv run ... -m skyrl.tinker.api` as its parent.
case "$1" in sync) exit 0;; run) ;; *) echo "uv stand-in: only 'sync' and 'run' ($*)" >&2; exit 2;; esac
args=("$@"); i=0
while [ $i -lt ${#args[@]} ]; do
  case "${args[$i]}" in
    run|--no-sync|--quiet|-q|--frozen|--offline) i=$((i+1));;
    --project|--extra|--python|--with|--directory) i=$((i+2));;
    *) break;;
  esac
done
"@PY@" "${args[@]:$i}"
"""


# -- here --------------------------------------------------------------------------------------------
def stage(dest: Path, repo: Path, cache: Path) -> None:
    # pip itself: a uv venv has none, so fall back to the PATH's python3
    has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0
    pip = [sys.executable if has_pip else "python3", "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp"]
    for plat in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_34_x86_64"):
        pip += ["--platform", plat]
    subprocess.run([*pip, "-d", str(dest / "whl"), *WHEELS], check=True)
    for p in PACKAGES:
        subprocess.run(["uv", "build", "--wheel", "-q", "-o", str(dest / "twhl"), str(repo / p)], check=True)
    subprocess.run(["uv", "pip", "install", "-q", "--target", str(dest / "site"), "--python-version", "3.12",
                    "--python-platform", "x86_64-manylinux_2_28", *SITE_REQUIREMENTS], check=True)
    for extra in ("cryptography", "cffi", "pycparser", "_cffi_backend"):  # pyjwt[crypto]: the servers sign nothing
        for path in (dest / "site").glob(f"{extra}*"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    # bubblewrap for the local sandbox, with the libraries it links, in case the machine has none
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    (dest / "lib").mkdir(exist_ok=True)
    shutil.copy2("/usr/bin/bwrap", dest / "bin" / "bwrap")
    for lib in ("libselinux.so.1", "libcap.so.2", "libpcre2-8.so.0"):
        shutil.copy2(os.path.realpath(f"/lib/x86_64-linux-gnu/{lib}"), dest / "lib" / lib)
    # the tool-lookup tasks and their world: acme's filesystem server over a folder of notes
    for topic, word in WORDS.items():
        (dest / "world" / "files" / "notes").mkdir(parents=True, exist_ok=True)
        (dest / "world" / "files" / "notes" / f"{topic}.txt").write_text(word + "\n")
        task = dest / "tasks" / f"read-{topic}"
        for sub in ("tests", "solution"):
            (task / sub).mkdir(parents=True, exist_ok=True)
        (task / "instruction.md").write_text(f"The file notes/{topic}.txt in the workspace holds one word. Read it "
                                             "with the files tools, then answer with that word only.\n")
        (task / "task.toml").write_text('version = "1.0"\n[metadata]\ncategory = "tool-lookup"\ndomain = "files"\n'
                                        "[agent]\ntimeout_sec = 300\n[verifier]\ntimeout_sec = 30\n"
                                        "[environment]\ncpus = 1\nmemory_mb = 2048\n")
        test = task / "tests" / "test.sh"
        test.write_text("#!/bin/bash\n# 1 when /app/answer.txt is exactly the word in the note, 0.5 when it holds it\n"
                        "answer=$(tr -d '[:punct:]' < /app/answer.txt 2>/dev/null | tr '[:upper:]' '[:lower:]' | xargs)\n"
                        f'if [ "$answer" = "{word}" ]; then r=1\n'
                        f'elif grep -qiw "{word}" /app/answer.txt 2>/dev/null; then r=0.5\n'
                        "else r=0; fi\necho $r > /logs/verifier/reward.txt\n")
        solve = task / "solution" / "solve.sh"
        solve.write_text(f"#!/bin/bash\nmkdir -p /app\necho {word} > /app/answer.txt\n")
        test.chmod(0o755)
        solve.chmod(0o755)
    shutil.copytree(repo / "examples/worlds/acme/servers/acme_mcp", dest / "world/servers/acme_mcp", dirs_exist_ok=True)
    (dest / "world" / "world.toml").write_text(
        '[world]\nname = "notes"\ndescription = "a workspace of note files behind acme\'s filesystem MCP server"\n'
        '[files]\nsource = "files"\nmount = "/workspace"\n'
        f'[runtime]\nrequirements = {json.dumps(SITE_REQUIREMENTS)}\npythonpath = ["servers"]\n'
        '[[servers]]\nname = "files"\nmodule = "acme_mcp.filesystem"\n')
    # SmolLM2: tackroom's tokenizer folder (tools template), the converted model's config, the GGUF in two parts
    shutil.copytree(cache / "tokenizers" / "smollm2", dest / "tokenizer-smollm2", dirs_exist_ok=True)
    (dest / "model").mkdir(exist_ok=True)
    for f in ("config.json", "generation_config.json", "tokenizer_config.json"):
        shutil.copy2(cache / "models" / "SmolLM2-135M-Instruct" / f, dest / "model" / f)
    data = (cache / "gguf" / GGUF_NAME).read_bytes()
    half = len(data) // 2
    for i, part in enumerate((data[:half], data[half:]), 1):  # beside DIR: each travels in a call of its own
        (dest.parent / f"g{i}").mkdir(exist_ok=True)
        (dest.parent / f"g{i}" / f"part{i}").write_bytes(part)
    (dest / "gguf.sha256").write_text(hashlib.sha256(data).hexdigest())
    shutil.copy2(__file__, dest / "gpu_train_e2e.py")
    print(f"staged {dest}")


# -- there -------------------------------------------------------------------------------------------
def world_site(cache: Path, executable: str, major: int, minor: int, machine: str, libc: str,
               libc_version: str) -> tuple[Path, str]:
    """Where archipelago's ``build_site`` looks for the world's site (the world gateway's requirements and the
    world's, for the sandbox's interpreter), and that interpreter's version."""
    from tackroom_archipelago.world import GATEWAY_REQUIREMENTS, SandboxPython, site_dir

    python = SandboxPython(executable=executable, major=major, minor=minor, machine=machine, libc=libc,
                           libc_version=libc_version)
    return site_dir([*GATEWAY_REQUIREMENTS, *SITE_REQUIREMENTS], python, cache / "worlds" / "sites"), python.version


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, text=True, **kw)


SFT_TOML = """
[sft]                             # examples/train/lookup-bash.toml's warm start, for a side-by-side with this CPU
dataset = "{dataset}"
epochs = 1
learning_rate = 1e-3
batch_size = 8
max_length = 2048
then_rl = {then_rl}
"""


def config_toml(d: Path, steps: int, max_tokens: int, extra_tasks: list[str] = (), mini_batch: int = 3,
                sft: Path | None = None, then_rl: bool = False) -> str:
    tasks = json.dumps([str(d / "tasks"), *(str(Path(t).resolve()) for t in extra_tasks)])
    warm = SFT_TOML.format(dataset=sft, then_rl=str(then_rl).lower()) if sft is not None else ""
    return f"""# written by benchmarks/gpu_train_e2e.py on the GPU machine
tasks = {tasks}
backend = "tinker"
{warm}
[harness]
name = "archipelago"
world = "{d / 'world'}"
tools_include = {json.dumps(TOOLS)}
final_answer_tool = true
tool_choice = "auto"
max_steps = 4
max_tokens_per_turn = {max_tokens}
answer_path = "/app/answer.txt"

[sandbox]
name = "local"

[verifier]
name = "test-script"

[loss]
name = "dppo"
aggregation = "sequence_mean"

[model]
path = "smollm2"
tokenizer = "smollm2"

[policy]
tokenizer = "smollm2"

[train]
mini_batch_size = {mini_batch}
samples_per_prompt = 4
max_staleness_steps = 1
learning_rate = 2e-3
max_training_steps = {steps}
temperature = 1.0
max_generate_length = {max_tokens}
max_prompt_length = 4096
preflight_passes = 0

[tinker]
lora_rank = 8
sampler = "tinker"
backend_config = {{ max_lora_adapters = 2, max_lora_rank = 8 }}

[gpus]
context_length = 8192

[rollout]
infra_attempts = 2
out = "{d / 'runs'}"
"""


def device(d: Path, steps: int, max_tokens: int, deadline_s: float, extra_tasks: list[str], mini_batch: int,
           sft: Path | None = None, then_rl: bool = False) -> int:
    t0 = time.time()
    out = Path(os.environ.get("OUT") or "/tmp/out")
    out.mkdir(parents=True, exist_ok=True)

    def log(*a) -> None:
        print(f"[{time.time() - t0:6.1f}s]", *a, flush=True)

    site = Path("/tmp/site")
    wheels = sorted(glob.glob(str(d / "whl" / "*.whl")) + glob.glob(str(d / "twhl" / "*.whl")))
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade",
          "--target", str(site), *wheels], check=True)
    log(f"installed {len(wheels)} wheels")
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONUNBUFFERED": "1", "TACKROOM_CACHE": "/root/tk-cache",
           "TACKROOM_TINKER_SERVER_DIR": "/root/tinker-server", "PATH": f"/tmp/uv-shim:{site}/bin:{os.environ['PATH']}",
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}  # the API process and the engine both import JAX
    # tools the local sandbox runs from /usr: bubblewrap (carried when missing) and the uv stand-in
    if not shutil.which("bwrap", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"):
        shutil.copy2(d / "bin" / "bwrap", "/usr/local/bin/bwrap")
        for lib in (d / "lib").iterdir():
            if not Path("/usr/lib/x86_64-linux-gnu", lib.name).exists():
                shutil.copy2(lib, Path("/usr/local/lib", lib.name))
        _run(["ldconfig"])
        log("bwrap: carried (the machine has none)")
    # always the stand-in, first on PATH: a real uv there (the image has one) would try to reach an index
    shim = Path("/tmp/uv-shim/uv")
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(UV_SHIM.replace("@PY@", sys.executable))
    shim.chmod(0o755)
    probe = _run(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"], capture_output=True)
    log(f"bwrap --unshare-all: exit {probe.returncode} {probe.stderr.strip()[:200]}")

    cache = Path(env["TACKROOM_CACHE"])
    shutil.copytree(d / "tokenizer-smollm2", cache / "tokenizers" / "smollm2", dirs_exist_ok=True)
    model = cache / "models" / "SmolLM2-135M-Instruct"
    parts = [STAGE / "part1", STAGE / "part2"]
    weights = "random-init (SmolLM2-135M's config)"
    if all(p.is_file() for p in parts) and not model.is_dir():
        gguf = cache / "gguf" / GGUF_NAME
        gguf.parent.mkdir(parents=True, exist_ok=True)
        with gguf.open("wb") as f:
            for p in parts:
                f.write(p.read_bytes())
        digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
        want = (d / "gguf.sha256").read_text().strip()
        if digest != want:
            log(f"GGUF sha256 {digest} != {want}: not using it")
        else:
            t = time.time()
            conv = _run([sys.executable, str(Path("packages/engine/src/tackroom_engine/convert_gguf_script.py")),
                         str(gguf), str(model)], env=env, capture_output=True)
            log(f"convert GGUF -> bf16: exit {conv.returncode} in {time.time() - t:.1f}s "
                f"{(conv.stdout + conv.stderr).strip()[-600:]}")
            if conv.returncode == 0:
                (model / "tackroom-weights.txt").write_text(
                    f"real: {GGUF_NAME} converted to bf16 (tackroom-engine's convert_gguf_script.py)")
    marker = model / "tackroom-weights.txt"
    if marker.is_file():  # converted by this call or an earlier one on the same warm machine
        weights = marker.read_text()
    if not model.is_dir():
        code = ("import json, sys, torch, transformers\n"
                "c = transformers.AutoConfig.for_model(**json.load(open(sys.argv[1])))\n"
                "torch.manual_seed(0)\n"
                "transformers.AutoModelForCausalLM.from_config(c, dtype=torch.bfloat16).save_pretrained(sys.argv[2])\n")
        _run([sys.executable, "-c", code, str(d / "model" / "config.json"), str(model)], env=env, check=True)
        for f in ("generation_config.json", "tokenizer_config.json"):
            shutil.copy2(d / "model" / f, model / f)
        shutil.copy2(d / "tokenizer-smollm2" / "tokenizer.json", model / "tokenizer.json")
    log(f"weights: {weights}")

    # the world's site, as archipelago's build_site would make it for the sandbox's python3 (the sandbox sees the
    # host's /usr only: without a python3 there, the world runs on this interpreter when it lives under /usr)
    sandbox_py = "python3"
    if not shutil.which("python3", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"):
        real = os.path.realpath(sys.executable)
        if real.startswith("/usr/"):
            sandbox_py = real
            world = d / "world" / "world.toml"
            world.write_text(world.read_text().replace("[runtime]\n", f'[runtime]\npython = "{real}"\n'))
        log(f"no python3 under /usr for the sandbox; this interpreter is {real}")
    py = _run(["env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", sandbox_py, "-c",
               "import platform, sys; lib, ver = platform.libc_ver(); print(sys.version_info[0], sys.version_info[1], "
               "platform.machine(), lib or 'musl', ver or '0.0')"], capture_output=True)
    log(f"sandbox python3: {py.stdout.strip()} {py.stderr.strip()[:200]}")
    if py.returncode == 0:
        major, minor, machine, libc, ver = py.stdout.split()
        sys.path.insert(0, str(site))
        target, version = world_site(cache, sandbox_py, int(major), int(minor), machine, libc, ver)
        shutil.copytree(d / "site", target, dirs_exist_ok=True)
        # mcp's client imports cryptography (pyjwt[crypto]); staged once, as wheels, for both sides
        crypto = [w for n in ("cryptography", "cffi", "pycparser", "pyjwt") for w in glob.glob(str(d / "whl" / f"{n}-*.whl"))]
        _run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade",
              "--target", str(target), *crypto], check=True)
        (target / ".tackroom-complete").write_text(json.dumps(SITE_REQUIREMENTS))
        log(f"world site -> {target}" + ("" if version == "3.12" else " (built for 3.12: may not import)"))

    cfg = d / "gpu-archipelago.toml"
    cfg.write_text(config_toml(d, steps, max_tokens, extra_tasks, mini_batch, sft, then_rl))
    shutil.copy2(cfg, out / "config.toml")
    smi = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
               capture_output=True)
    log(f"GPU: {smi.stdout.strip()}; setup {time.time() - t0:.1f}s; starting tackroom train ({steps} steps)")
    t = time.time()
    with (out / "train.log").open("w") as f:
        proc = subprocess.Popen([str(site / "bin" / "tackroom"), "train", str(cfg), "--run-id", "gpu"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        def stop() -> None:
            log(f"deadline {deadline_s:.0f}s reached: stopping the run (SIGTERM, SIGKILL 5 s later)")
            os.killpg(proc.pid, signal.SIGTERM)
            time.sleep(5)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        watchdog = threading.Timer(max(1.0, deadline_s - (time.time() - t0)), stop)
        watchdog.start()
        for line in proc.stdout:
            f.write(line)
            print(line, end="", flush=True)
        proc.wait()
        watchdog.cancel()
    log(f"tackroom train exited {proc.returncode} after {time.time() - t:.1f}s")
    run = d / "runs" / "gpu"
    records = ("sft.json", "sft_steps.jsonl") if sft is not None else ("trajectories.jsonl",)
    for name in ("steps.jsonl", "summary.json", *records):  # $OUT returns at most 8 files
        if (run / name).is_file():
            shutil.copy2(run / name, out / name)
    server_log = run / "tinker" / "server.log"
    if server_log.is_file():
        (out / "server.log.tail").write_bytes(server_log.read_bytes()[-200_000:])
    rows = [json.loads(x) for x in (run / "steps.jsonl").read_text().splitlines()] if (run / "steps.jsonl").is_file() else []
    summary = {"weights": weights, "gpu": smi.stdout.strip(), "steps": len(rows), "exit": proc.returncode,
               "train_wall_s": round(time.time() - t, 1), "setup_s": round(t - t0, 1)}
    (out / "e2e.json").write_text(json.dumps(summary))
    print("E2E " + json.dumps(summary))
    for r in rows:
        print("STEP " + json.dumps({k: r.get(k) for k in ("step", "mean_reward", "rollout_s", "train_s", "handoff_s",
                                                          "staleness", "version", "mismatch_mean", "mismatch_max",
                                                          "sent_rows")}))
    errors: dict[str, int] = {}  # what failed the trials, in a few lines (the trial folders do not come back)
    for result in sorted(run.glob("rollouts/*/*/result.json")):
        error = json.loads(result.read_text()).get("error") or {}
        if error:
            key = f"{error.get('error_class')} {error.get('type')} ({error.get('phase')}): {error.get('message', '')[:300]}"
            errors[key] = errors.get(key, 0) + 1
    for key, n in sorted(errors.items(), key=lambda kv: -kv[1])[:5]:
        print(f"TRIAL ERROR x{n}: {key}")
    sft_rows = [json.loads(x) for x in (run / "sft_steps.jsonl").read_text().splitlines()] \
        if (run / "sft_steps.jsonl").is_file() else []
    for r in sft_rows:
        print("SFT " + json.dumps({k: r.get(k) for k in ("step", "epoch", "nll", "trained_tokens", "train_s")}))
    return 0 if rows or (sft is not None and not then_rl and sft_rows) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage", help="here: fill DIR (git-ignored) with what the GPU machine needs")
    s.add_argument("dir")
    s.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]))
    s.add_argument("--cache", default=os.environ.get("TACKROOM_CACHE", str(Path.home() / ".cache" / "tackroom")))
    r = sub.add_parser("device", help="there: install, convert, run `tackroom train`, copy its records to $OUT")
    r.add_argument("dir")
    r.add_argument("--steps", type=int, default=5)
    r.add_argument("--max-tokens", type=int, default=64, help="per turn")
    r.add_argument("--deadline", type=float, default=540.0, help="seconds from the start of this command")
    r.add_argument("--extra-tasks", action="append", default=[], help="more task folders (e.g. the overfit tasks)")
    r.add_argument("--mini-batch", type=int, default=3, help="tasks per step ([train] mini_batch_size)")
    r.add_argument("--sft", type=Path, help="a demonstrations JSONL (tackroom collect): an [sft] warm start first")
    r.add_argument("--then-rl", action="store_true", help="with --sft: RL after the warm start (default: stop there)")
    a = p.parse_args(argv)
    if a.cmd == "stage":
        stage(Path(a.dir).resolve(), Path(a.repo), Path(a.cache))
        return 0
    sft = a.sft.resolve() if a.sft is not None else None
    return device(Path(a.dir).resolve(), a.steps, a.max_tokens, a.deadline, a.extra_tasks, a.mini_batch, sft, a.then_rl)


if __name__ == "__main__":
    sys.exit(main())
