"""Policy-gateway overhead at RL concurrency: the same requests direct to the engine and through the gateway, side by side.

    uv run python benchmarks/gateway_overhead.py --stub-engine                     # 64, 256, 1024 sessions, plain + streamed
    uv run python benchmarks/gateway_overhead.py --stub-engine --stub-token-ms 20  # the stub's decode time off the CPU
    uv run python benchmarks/gateway_overhead.py --engine http://127.0.0.1:8011/v1 --concurrency 64 --max-tokens 16
    uv run python benchmarks/gateway_overhead.py --stub-engine --concurrency 256 --rounds 1 --profile gw.prof
    uv run python benchmarks/gateway_overhead.py --stub-engine --concurrency 256 --dialect messages --dialect gemini
    uv run python benchmarks/gateway_overhead.py --stub-engine --concurrency 256 --workers 1 --workers 2  # side by side

Direct: ``POST /v1/completions`` with the prompt ids the chat template gives,
``return_token_ids`` and ``logprobs`` (exactly the engine work the gateway asks
for). Gateway: the same conversation in each ``--dialect`` the gateway speaks (chat completions, Responses,
Messages, Gemini ``generateContent``), one session per request (made beforehand, untimed, with ``POST /sessions``
and the admin token the gateway prints).
Both generate exactly ``--max-tokens`` tokens (``ignore_eos``, greedy). Direct and
gateway batches alternate, ``--rounds`` times, at each ``--concurrency``, plain
and streamed. The gateway runs as its own process (``python -m tackroom_gateway``), as it
would beside a trainer; the load comes from an aiohttp client (a C HTTP parser, so the
load generator takes little CPU from what it measures). ``--workers N`` (repeatable) starts it as
``--workers N``: a front and N worker processes on one address; each N is a gateway of its own, measured in turn
against the same engine, and its CPU and memory are those of all its processes.

``--stub-engine`` puts a stub engine that answers at once (or after ``--stub-token-ms``
per token) in place of vLLM, so the difference is the gateway's own per-request cost
(render, tokenize, HTTP hop, parse, record). Printed per row: the throughput ratio,
added p50/p99 and time to first token, CPU per request of the gateway (and of the stub
and the client per direct request), the gateway's resident memory per session opened.
Goals at 256 sessions on the stub: <= 5 % throughput loss, <= 2 ms added p50 (see
packages/gateway/README.md, "At RL concurrency", for figures and why a CPU-bound
machine cannot show them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_instant_engine(port: int, tokens: int, token_ms: float = 0.0) -> None:
    """A stub /v1/completions that answers with ``tokens`` ids (run in its own process): at once, or after
    ``token_ms`` per token (a GPU engine's decode time, spent off this machine's CPU)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    ids = [28, 1033, 30] * (tokens // 3 + 1)
    ids = ids[:tokens]

    async def models(request):
        return JSONResponse({"data": [{"id": "instant", "max_model_len": 8192}]})

    async def complete(request):
        body = json.loads(await request.body())
        n = min(int(body.get("max_tokens") or tokens), tokens)
        out = ids[:n]
        if not body.get("stream"):
            if token_ms:
                await asyncio.sleep(token_ms * n / 1000)
            lp = {"tokens": ["x"] * n, "token_logprobs": [-0.1] * n, "top_logprobs": [{}] * n}
            return JSONResponse({"choices": [{"index": 0, "text": "x" * n, "token_ids": out, "prompt_token_ids": body["prompt"],
                                              "finish_reason": "length", "logprobs": lp}]})

        async def events():
            for k, t in enumerate(out):
                if token_ms:
                    await asyncio.sleep(token_ms / 1000)
                choice = {"index": 0, "text": "x", "token_ids": [t], "finish_reason": "length" if k == n - 1 else None,
                          "logprobs": {"tokens": ["x"], "token_logprobs": [-0.1], "top_logprobs": [{}]}}
                yield b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def health(request):
        return Response("ok")

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", complete, methods=["POST"]), Route("/health", health)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False, backlog=4096)


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} not ready after {timeout}s")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc): a multi-worker gateway's front and its workers."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process and its descendants have used so far (Linux /proc), robust to a busy
    machine."""
    total = 0.0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan") if p == pid else total
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_bytes(pid: int) -> float:
    """Resident memory of a process and its descendants (Linux /proc), in bytes."""
    total = 0.0
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            if p == pid:
                return float("nan")
    return total


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


DIALECTS = ("chat", "responses", "messages", "gemini")


def dialect_request(dialect: str, base: str, model: str, text: str, max_tokens: int, stream: bool) -> tuple[str, dict]:
    """The same one-message request in each dialect the gateway speaks, on the session whose OpenAI base URL is
    ``base``; greedy, at most ``max_tokens`` tokens (exactly, with vLLM's ``ignore_eos``, where the dialect lets an
    extra field through: Gemini's refuses unknown fields, so a real engine may stop sooner there; throughput counts
    the tokens each answer reports)."""
    root = base.removesuffix("/v1")
    greedy = {"temperature": 0, "ignore_eos": True, **({"stream": True} if stream else {})}
    if dialect == "chat":
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, **greedy}
        return f"{base}/chat/completions", {**body, **({"stream_options": {"include_usage": True}} if stream else {})}
    if dialect == "responses":
        return f"{base}/responses", {"model": model, "input": text, "max_output_tokens": max_tokens, **greedy}
    if dialect == "messages":
        return f"{root}/v1/messages", {"model": model, "max_tokens": max_tokens, **greedy,
                                       "messages": [{"role": "user", "content": text}]}
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"{root}/v1beta/models/{model}:{method}", {"contents": [{"role": "user", "parts": [{"text": text}]}],
                                                      "generationConfig": {"maxOutputTokens": max_tokens, "temperature": 0}}


def completion_tokens(obj: dict[str, Any]) -> int | None:
    """The completion tokens an answer (or a streamed event) reports, in any dialect; None when it says none."""
    if obj.get("object") == "chat.completion" or ("usage" in obj and "completion_tokens" in (obj["usage"] or {})):
        return obj["usage"]["completion_tokens"]
    if obj.get("object") == "text_completion" or "token_ids" in ((obj.get("choices") or [{}])[0]):
        return sum(len(c.get("token_ids") or []) for c in obj.get("choices") or [])
    if obj.get("type") in ("response.completed", "response.incomplete"):
        return obj["response"]["usage"]["output_tokens"]
    if obj.get("object") == "response":
        return obj["usage"]["output_tokens"]
    if obj.get("type") in ("message", "message_delta"):
        return obj["usage"]["output_tokens"]
    if "usageMetadata" in obj and obj.get("candidates", [{}])[0].get("finishReason"):
        return obj["usageMetadata"].get("candidatesTokenCount", 0)
    return None


def has_text(obj: dict[str, Any]) -> bool:
    """Whether a streamed event carries generated text (for the time to first token)."""
    for ch in obj.get("choices") or []:
        if ch.get("text") or (ch.get("delta") or {}).get("content"):
            return True
    if obj.get("type") in ("response.output_text.delta", "content_block_delta"):
        return True
    return any(p.get("text") for c in obj.get("candidates") or [] for p in (c.get("content") or {}).get("parts") or [])


async def one(client: aiohttp.ClientSession, url: str, body: dict[str, Any], stream: bool) -> tuple[float, float, int]:
    """(latency s, time to first token s, completion tokens)."""
    start = time.perf_counter()
    if not stream:
        async with client.post(url, json=body) as r:
            if r.status != 200:
                raise RuntimeError(f"{url}: HTTP {r.status}: {(await r.text())[:500]}")
            n = completion_tokens(await r.json()) or 0
        t = time.perf_counter() - start
        return t, t, n
    first = None
    n = 0
    async with client.post(url, json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{url}: HTTP {r.status}: {(await r.text())[:500]}")
        async for raw in r.content:
            if not raw.startswith(b"data: {"):
                continue
            obj = json.loads(raw[6:])
            tokens = completion_tokens(obj)
            if tokens is not None:  # the engine's chunks each carry their ids; a dialect's last event the total
                n = n + tokens if any("token_ids" in c for c in obj.get("choices") or []) else tokens
            if first is None and has_text(obj):
                first = time.perf_counter() - start
    t = time.perf_counter() - start
    return t, first or t, n


async def batch(client, requests: list[tuple[str, dict]], concurrency: int, stream: bool) -> tuple[list[float], list[float], int, float]:
    sem = asyncio.Semaphore(concurrency)
    lat, ttft, tokens = [], [], 0

    async def go(url, body):
        nonlocal tokens
        async with sem:
            t, f, n = await one(client, url, body, stream)
            lat.append(t)
            ttft.append(f)
            tokens += n

    start = time.perf_counter()
    await asyncio.gather(*(go(u, b) for u, b in requests))
    return lat, ttft, tokens, time.perf_counter() - start


async def open_sessions(client, gateway_url: str, admin_token: str, ids: list[str]) -> list[str]:
    """Each session's base URL (``.../sessions/<id>/<token>/v1``), from ``POST /sessions`` (untimed)."""
    async def one_session(sid: str) -> str:
        async with client.post(f"{gateway_url}/sessions", json={"session_id": sid},
                               headers={"Authorization": f"Bearer {admin_token}"}) as r:
            r.raise_for_status()
            return (await r.json())["base_url"]

    return list(await asyncio.gather(*(one_session(sid) for sid in ids)))


async def measure(engine_url: str, gateway_url: str, gateway_pid: int, admin_token: str,
                  args: argparse.Namespace, engine_pid: int | None = None) -> list[dict[str, Any]]:
    from tackroom_gateway import ChatTemplate

    tmpl = ChatTemplate.from_path(args.tokenizer)
    topics = ["horses", "saddles", "bridles", "stables", "oats", "hay", "spurs", "reins", "ponies", "foals", "mules", "carts"]
    rows = []
    most = max(args.concurrency)
    # The load generator is aiohttp (its HTTP parser is C): on 2 cores a pure-Python client (httpx) took CPU from
    # the servers it measures. Idle connections are let go before the servers' keep-alive timeout (uvicorn's
    # 5 s) closes them under a request.
    connector = aiohttp.TCPConnector(limit=most, keepalive_timeout=4.0)
    # --connection-per-session: each session's request on its own connection, as an agent with its own HTTP client
    # sends it (and as a gateway of several workers hands a connection to the session's owner without a hop)
    own = aiohttp.TCPConnector(limit=most, force_close=True) if args.connection_per_session else None
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as client, \
            aiohttp.ClientSession(connector=own or connector, connector_owner=own is not None,
                                  timeout=aiohttp.ClientTimeout(total=600)) as gw_client:
        async with client.get(engine_url + "/models") as r:
            model = (await r.json())["data"][0]["id"]
        for dialect, conc, stream in ((d, c, m) for d in args.dialects for c in args.concurrency for m in args.modes):
            acc = {"direct": ([], [], 0, 0.0), "gateway": ([], [], 0, 0.0)}
            gw_cpu, stub_cpu, client_cpu = 0.0, 0.0, {"direct": 0.0, "gateway": 0.0}
            opened, rss0 = 0, rss_bytes(gateway_pid)
            print(f"measuring {dialect} at {conc} sessions, {'streamed' if stream else 'plain'} …", file=sys.stderr)
            for rnd in range(args.rounds):
                n = max(conc, args.requests)
                msgs = [[{"role": "user", "content": f"Tell me about {topics[(i + rnd) % len(topics)]} (#{rnd}-{i})."}] for i in range(n)]
                common = {"max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True}
                direct = [(engine_url + "/completions", {"model": model, "prompt": tmpl.render_ids(m), "return_token_ids": True, "logprobs": 0, "stream": stream, **common}) for m in msgs]
                bases = await open_sessions(client, gateway_url, admin_token, [f"b{conc}-{int(stream)}-{rnd}-{i}" for i in range(n)])
                opened += n
                via = []
                for base, m in zip(bases, msgs, strict=True):
                    url, body = dialect_request(dialect, base, model, m[0]["content"], args.max_tokens, stream)
                    via.append((url, body))
                order = [("direct", direct), ("gateway", via)] if rnd % 2 == 0 else [("gateway", via), ("direct", direct)]
                for name, reqs in order:
                    cpu0, stub0, own0 = cpu_seconds(gateway_pid), cpu_seconds(engine_pid or 0), time.process_time()
                    lat, ttft, tok, wall = await batch(gw_client if name == "gateway" else client, reqs, conc, stream)
                    client_cpu[name] += time.process_time() - own0
                    if name == "gateway":
                        gw_cpu += cpu_seconds(gateway_pid) - cpu0
                    else:
                        stub_cpu += cpu_seconds(engine_pid or 0) - stub0
                    a = acc[name]
                    acc[name] = (a[0] + lat, a[1] + ttft, a[2] + tok, a[3] + wall)
            d, g = acc["direct"], acc["gateway"]
            rows.append({
                "dialect": dialect, "concurrency": conc, "stream": stream, "requests": len(d[0]),
                "direct_tps": d[2] / d[3], "gateway_tps": g[2] / g[3],
                "direct_p50": pct(d[0], 0.5) * 1000, "gateway_p50": pct(g[0], 0.5) * 1000,
                "direct_p99": pct(d[0], 0.99) * 1000, "gateway_p99": pct(g[0], 0.99) * 1000,
                "ttft_added_p50": (pct(g[1], 0.5) - pct(d[1], 0.5)) * 1000,
                "gateway_cpu_ms": gw_cpu / len(g[0]) * 1000,
                "engine_cpu_ms": stub_cpu / len(d[0]) * 1000 if engine_pid else None,
                "client_cpu_ms": client_cpu["direct"] / len(d[0]) * 1000,
                "kib_per_session": (rss_bytes(gateway_pid) - rss0) / opened / 1024,
            })
    return rows


def stop_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=60)  # under --profile the gateway writes its profile first
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def run_against(engine: str, label: str, args: argparse.Namespace, engine_pid: int | None = None,
                workers: int = 1) -> list[dict[str, Any]]:
    """Start a gateway (``workers`` processes behind one address) in front of ``engine`` and measure; the gateway
    is stopped after."""
    gport = free_port()
    prefix = [sys.executable, "-m", "cProfile", "-o", args.profile] if args.profile else [sys.executable]
    proc = subprocess.Popen(
        [*prefix, "-m", "tackroom_gateway", "--engine", engine, "--port", str(gport), "--tokenizer", args.tokenizer,
         "--workers", str(workers)],
        start_new_session=True, stdout=subprocess.PIPE, text=True,
    )
    try:
        gateway_url = f"http://127.0.0.1:{gport}"
        wait_ready(gateway_url + "/health", proc)
        admin_token = next(line.split()[-1] for line in proc.stdout if line.strip().startswith("admin token:"))
        rows = asyncio.run(measure(engine.rstrip("/"), gateway_url, proc.pid, admin_token, args, engine_pid))
    finally:
        stop_all([proc])
    for r in rows:
        r["engine"], r["workers"] = label, workers
    return rows


def print_rows(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"\ngateway vs direct: {args.max_tokens} tokens/request, {args.rounds} alternating rounds, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    head = (f"{'engine':<14} {'dialect':<9} {'conc':>4} {'wk':>2} {'mode':<6} {'reqs':>5} | {'tok/s direct':>12} {'tok/s gw':>9} {'ratio':>6} | "
            f"{'p50 direct':>10} {'added p50':>9} | {'p99 direct':>10} {'added p99':>9} | {'TTFT +p50':>9} | "
            f"{'gw CPU/req':>10} {'stub CPU/req':>12} {'client CPU/req':>14} | {'KiB/session':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        stub_ms = "-" if r.get("engine_cpu_ms") is None else f"{r['engine_cpu_ms']:.2f}ms"
        print(
            f"{r['engine']:<14} {r['dialect']:<9} {r['concurrency']:>4} {r['workers']:>2} "
            f"{'stream' if r['stream'] else 'plain':<6} {r['requests']:>5} | "
            f"{r['direct_tps']:>12.1f} {r['gateway_tps']:>9.1f} {r['gateway_tps'] / r['direct_tps']:>6.3f} | "
            f"{r['direct_p50']:>8.1f}ms {r['gateway_p50'] - r['direct_p50']:>+7.1f}ms | "
            f"{r['direct_p99']:>8.1f}ms {r['gateway_p99'] - r['direct_p99']:>+7.1f}ms | {r['ttft_added_p50']:>+7.1f}ms | "
            f"{r['gateway_cpu_ms']:>8.2f}ms {stub_ms:>12} {r['client_cpu_ms']:>12.2f}ms | {r['kib_per_session']:>11.1f}"
        )
    print("goal at 256 sessions on the stub engine: ratio >= 0.95, added p50 <= 2 ms; 'wk' the gateway's worker "
          "processes; 'gw CPU/req' the gateway's own CPU time per request, all its processes together (stub, client: "
          "theirs per direct request); KiB/session its resident-memory growth per session opened")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default=os.environ.get("TACKROOM_ENGINE_URL"), help="a real engine's base URL (vLLM)")
    ap.add_argument("--stub-engine", "--instant-engine", dest="stub_engine", action="store_true",
                    help="also (or only) measure against a stub engine: the gateway's own cost")
    ap.add_argument("--stub-token-ms", type=float, default=0.0,
                    help="the stub's decode time per token (0: answers at once); a GPU engine's time, spent off this CPU")
    ap.add_argument("--tokenizer", default="smollm2")
    ap.add_argument("--connection-per-session", action="store_true",
                    help="the gateway's requests each on a connection of their own (an agent's own client), not pooled")
    ap.add_argument("--concurrency", type=int, action="append", help="concurrent sessions, repeatable (default 64, 256, 1024)")
    ap.add_argument("--requests", type=int, default=0, help="requests per batch (at least the concurrency)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--mode", choices=["plain", "stream", "both"], default="both")
    ap.add_argument("--dialect", action="append", choices=DIALECTS,
                    help="the API the gateway is called in, repeatable (default: all four); direct is always the engine's")
    ap.add_argument("--workers", type=int, action="append",
                    help="the gateway's worker processes (`--workers N`), repeatable to compare side by side (default 1)")
    ap.add_argument("--profile", help="run the gateway under cProfile and write its stats here (slows it down; with "
                                      "--workers above 1, only the front's)")
    ap.add_argument("--json", help="also write the rows here as JSON")
    ap.add_argument("--serve-instant-engine", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_instant_engine:
        serve_instant_engine(args.serve_instant_engine, args.max_tokens, args.stub_token_ms)
        return
    args.concurrency = args.concurrency or [64, 256, 1024]
    args.modes = {"plain": [False], "stream": [True], "both": [False, True]}[args.mode]
    args.dialects = args.dialect or list(DIALECTS)
    args.workers = args.workers or [1]
    if not args.engine and not args.stub_engine:
        raise SystemExit("give --engine URL (or set TACKROOM_ENGINE_URL), --stub-engine, or both")
    rows: list[dict[str, Any]] = []
    if args.stub_engine:
        port = free_port()
        stub = subprocess.Popen([sys.executable, __file__, "--serve-instant-engine", str(port), "--max-tokens",
                                 str(args.max_tokens), "--stub-token-ms", str(args.stub_token_ms)], start_new_session=True)
        try:
            wait_ready(f"http://127.0.0.1:{port}/v1/models", stub)
            label = f"stub {args.stub_token_ms:g}ms/tok" if args.stub_token_ms else "stub instant"
            for workers in args.workers:
                rows += run_against(f"http://127.0.0.1:{port}/v1", label, args, stub.pid, workers)
        finally:
            stop_all([stub])
    if args.engine:
        for workers in args.workers:
            rows += run_against(args.engine, "engine", args, workers=workers)
    print_rows(rows, args)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
