"""Carry one HTTP request from stdin to a server on the sandbox's loopback, and its answer to stdout.

Standard library only, so it starts fast. The host runs it through
``Sandbox.exec`` when the sandbox cannot publish ports: stdin is
``{"method", "path", "headers": [[k, v], ...], "body": <base64>, "port" (or "port_file"), "timeout"}``;
stdout is ``{"status", "headers": [[k, v], ...], "body": <base64>}`` or
``{"error": "..."}`` when the server could not be reached.

With ``"wait": {"pid_file", "seconds"}`` it asks again every 50 ms until the answer is a 200, and answers
``{"error": "exited"}`` once the process in ``pid_file`` is gone, ``{"error": "timeout"}`` after ``seconds``:
one exec waits for a server to come up, instead of one per look.
"""

import base64
import http.client
import json
import os
import sys
import time


def port_of(req: dict) -> int | None:
    """``port``, or the one the server wrote to ``port_file`` once it listens (None until then)."""
    if req.get("port"):
        return int(req["port"])
    try:
        with open(req["port_file"]) as f:
            return int(f.read().strip())
    except (OSError, ValueError, KeyError):
        return None


def ask(req: dict, timeout: float) -> dict:
    port = port_of(req)
    if port is None:
        return {"error": "the server has not written its port yet"}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        conn.request(req["method"], req["path"], body=base64.b64decode(req.get("body") or ""),
                     headers=dict(req.get("headers") or []))
        resp = conn.getresponse()
        body = resp.read()
        return {"status": resp.status, "headers": resp.getheaders(), "body": base64.b64encode(body).decode()}
    except (OSError, http.client.HTTPException) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def alive(pid_file: str) -> bool:
    """The process is there and not a zombie (no reaper may be waiting for it)."""
    try:
        with open(pid_file) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def wait(req: dict, pid_file: str, seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    while True:
        out = ask(req, timeout=min(5.0, max(0.5, deadline - time.monotonic())))
        if out.get("status") == 200:
            return out
        if not alive(pid_file):
            return {"error": "exited"}
        if time.monotonic() > deadline:
            return {"error": "timeout"}
        time.sleep(0.05)


def main() -> None:
    req = json.loads(sys.stdin.read())
    if req.get("wait"):
        out = wait(req, req["wait"]["pid_file"], float(req["wait"]["seconds"]))
    else:
        out = ask(req, timeout=float(req.get("timeout", 600)))
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
