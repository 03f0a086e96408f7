"""Policy-gateway overhead: the same requests direct to the engine and through the gateway, side by side.

    uv run python benchmarks/gateway_overhead.py --engine http://127.0.0.1:8011/v1
    uv run python benchmarks/gateway_overhead.py --instant-engine      # the gateway's own cost only

Direct: ``POST /v1/completions`` with the prompt ids the chat template gives,
``return_token_ids`` and ``logprobs`` (exactly the engine work the gateway asks
for). Gateway: ``POST <session base URL>/chat/completions`` with the messages, one
session per request (made beforehand, untimed, with ``POST /sessions`` and the
admin token the gateway prints).
Both generate exactly ``--max-tokens`` tokens (``ignore_eos``, greedy). Direct and
gateway batches alternate, ``--rounds`` times, at each ``--concurrency``, plain
and streamed. The gateway runs as its own process (``tackroom gateway``), as it
would beside a trainer.

``--instant-engine`` puts a stub engine that answers at once in place of vLLM, so
the difference is the gateway's own per-request cost (render, tokenize, HTTP hop,
parse, record). Goals: <= 5 % throughput loss, <= 2 ms added p50.
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

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_instant_engine(port: int, tokens: int) -> None:
    """A stub /v1/completions that answers immediately with ``tokens`` ids (run in its own process)."""
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
            lp = {"tokens": ["x"] * n, "token_logprobs": [-0.1] * n, "top_logprobs": [{}] * n}
            return JSONResponse({"choices": [{"index": 0, "text": "x" * n, "token_ids": out, "prompt_token_ids": body["prompt"],
                                              "finish_reason": "length", "logprobs": lp}]})

        async def events():
            for k, t in enumerate(out):
                choice = {"index": 0, "text": "x", "token_ids": [t], "finish_reason": "length" if k == n - 1 else None,
                          "logprobs": {"tokens": ["x"], "token_logprobs": [-0.1], "top_logprobs": [{}]}}
                yield b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def health(request):
        return Response("ok")

    app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", complete, methods=["POST"]), Route("/health", health)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc), robust to a busy machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def one(client: httpx.AsyncClient, url: str, body: dict[str, Any], stream: bool) -> tuple[float, float, int]:
    """(latency s, time to first token s, completion tokens)."""
    start = time.perf_counter()
    if not stream:
        r = await client.post(url, json=body)
        r.raise_for_status()
        data = r.json()
        n = data["usage"]["completion_tokens"] if "usage" in data and data.get("object") == "chat.completion" else len(data["choices"][0]["token_ids"])
        t = time.perf_counter() - start
        return t, t, n
    first = None
    n = 0
    async with client.stream("POST", url, json={**body, "stream": True}) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            obj = json.loads(line[6:])
            for ch in obj.get("choices") or []:
                if "token_ids" in ch:
                    n += len(ch["token_ids"] or [])
                elif (ch.get("delta") or {}).get("content"):
                    n += 1  # the gateway streams one delta per engine chunk (one token)
                if first is None and (ch.get("text") or (ch.get("delta") or {}).get("content")):
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
    """Each session's base URL (``.../sessions/<id>/<token>/v1``), from ``POST /sessions``."""
    urls = []
    for sid in ids:
        r = await client.post(f"{gateway_url}/sessions", json={"session_id": sid}, headers={"Authorization": f"Bearer {admin_token}"})
        r.raise_for_status()
        urls.append(r.json()["base_url"])
    return urls


async def measure(engine_url: str, gateway_url: str, gateway_pid: int, admin_token: str,
                  args: argparse.Namespace) -> list[dict[str, Any]]:
    from tackroom_gateway import ChatTemplate

    tmpl = ChatTemplate.from_path(args.tokenizer)
    topics = ["horses", "saddles", "bridles", "stables", "oats", "hay", "spurs", "reins", "ponies", "foals", "mules", "carts"]
    rows = []
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as client:
        model = (await client.get(engine_url + "/models")).json()["data"][0]["id"]
        for conc in args.concurrency:
            for stream in (False, True):
                acc = {"direct": ([], [], 0, 0.0), "gateway": ([], [], 0, 0.0)}
                gw_cpu = 0.0
                for rnd in range(args.rounds):
                    n = max(conc, args.requests)
                    msgs = [[{"role": "user", "content": f"Tell me about {topics[(i + rnd) % len(topics)]} (#{rnd}-{i})."}] for i in range(n)]
                    common = {"max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True}
                    direct = [(engine_url + "/completions", {"model": model, "prompt": tmpl.render_ids(m), "return_token_ids": True, "logprobs": 0, **common}) for m in msgs]
                    bases = await open_sessions(client, gateway_url, admin_token, [f"b{conc}-{int(stream)}-{rnd}-{i}" for i in range(n)])
                    via = [(f"{base}/chat/completions", {"messages": m, **common}) for base, m in zip(bases, msgs, strict=True)]
                    order = [("direct", direct), ("gateway", via)] if rnd % 2 == 0 else [("gateway", via), ("direct", direct)]
                    for name, reqs in order:
                        cpu0 = cpu_seconds(gateway_pid)
                        lat, ttft, tok, wall = await batch(client, reqs, conc, stream)
                        if name == "gateway":
                            gw_cpu += cpu_seconds(gateway_pid) - cpu0
                        a = acc[name]
                        acc[name] = (a[0] + lat, a[1] + ttft, a[2] + tok, a[3] + wall)
                d, g = acc["direct"], acc["gateway"]
                rows.append({
                    "concurrency": conc, "stream": stream, "requests": len(d[0]),
                    "direct_tps": d[2] / d[3], "gateway_tps": g[2] / g[3],
                    "direct_p50": pct(d[0], 0.5) * 1000, "gateway_p50": pct(g[0], 0.5) * 1000,
                    "direct_p95": pct(d[0], 0.95) * 1000, "gateway_p95": pct(g[0], 0.95) * 1000,
                    "ttft_added_p50": (pct(g[1], 0.5) - pct(d[1], 0.5)) * 1000,
                    "gateway_cpu_ms": gw_cpu / len(g[0]) * 1000,
                })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default=os.environ.get("TACKROOM_ENGINE_URL"), help="engine base URL (default $TACKROOM_ENGINE_URL)")
    ap.add_argument("--instant-engine", action="store_true", help="use a stub engine that answers at once (gateway cost only)")
    ap.add_argument("--tokenizer", default="smollm2")
    ap.add_argument("--concurrency", type=int, action="append", help="repeatable (default 1 and 8)")
    ap.add_argument("--requests", type=int, default=8, help="requests per batch (at least the concurrency)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--serve-instant-engine", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_instant_engine:
        serve_instant_engine(args.serve_instant_engine, args.max_tokens)
        return
    args.concurrency = args.concurrency or [1, 8]
    procs: list[subprocess.Popen] = []
    try:
        if args.instant_engine:
            port = free_port()
            procs.append(subprocess.Popen([sys.executable, __file__, "--serve-instant-engine", str(port), "--max-tokens", str(args.max_tokens)], start_new_session=True))
            args.engine = f"http://127.0.0.1:{port}/v1"
            wait_ready(args.engine + "/models", procs[-1])
        if not args.engine:
            raise SystemExit("give --engine URL (or set TACKROOM_ENGINE_URL), or use --instant-engine")
        gport = free_port()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tackroom_gateway", "--engine", args.engine, "--port", str(gport), "--tokenizer", args.tokenizer],
            start_new_session=True, stdout=subprocess.PIPE, text=True,
        ))
        gateway_url = f"http://127.0.0.1:{gport}"
        wait_ready(gateway_url + "/health", procs[-1])
        admin_token = next(line.split()[-1] for line in procs[-1].stdout if line.strip().startswith("admin token:"))
        rows = asyncio.run(measure(args.engine.rstrip("/"), gateway_url, procs[-1].pid, admin_token, args))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
    engine = "instant stub engine" if args.instant_engine else args.engine
    print(f"\ngateway vs direct on {engine}: {args.max_tokens} tokens/request, {args.rounds} alternating rounds")
    head = f"{'conc':>4} {'mode':<7} {'reqs':>4} | {'tok/s direct':>12} {'tok/s gw':>9} {'ratio':>6} | {'p50 direct':>10} {'p50 gw':>8} {'added p50':>9} | {'p95 direct':>10} {'p95 gw':>8} {'added p95':>9} | {'TTFT +p50':>9} | {'gw CPU/req':>10}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['concurrency']:>4} {'stream' if r['stream'] else 'plain':<7} {r['requests']:>4} | {r['direct_tps']:>12.1f} {r['gateway_tps']:>9.1f} "
            f"{r['gateway_tps'] / r['direct_tps']:>6.3f} | {r['direct_p50']:>8.1f}ms {r['gateway_p50']:>6.1f}ms {r['gateway_p50'] - r['direct_p50']:>+7.1f}ms | "
            f"{r['direct_p95']:>8.1f}ms {r['gateway_p95']:>6.1f}ms {r['gateway_p95'] - r['direct_p95']:>+7.1f}ms | {r['ttft_added_p50']:>+7.1f}ms | {r['gateway_cpu_ms']:>8.2f}ms"
        )
    print("goal: ratio >= 0.95, added p50 <= 2 ms; 'gw CPU/req' is the gateway process's own CPU time per request")


if __name__ == "__main__":
    main()
