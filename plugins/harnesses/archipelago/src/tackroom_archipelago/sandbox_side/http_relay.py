"""Carry one HTTP request from stdin to a server on the sandbox's loopback, and its answer to stdout.

Standard library only, so it starts fast. The host runs it through
``Sandbox.exec`` when the sandbox cannot publish ports: stdin is
``{"method", "path", "headers": [[k, v], ...], "body": <base64>, "port", "timeout"}``;
stdout is ``{"status", "headers": [[k, v], ...], "body": <base64>}`` or
``{"error": "..."}`` when the server could not be reached.
"""

import base64
import http.client
import json
import sys


def main() -> None:
    req = json.loads(sys.stdin.read())
    try:
        conn = http.client.HTTPConnection("127.0.0.1", int(req["port"]), timeout=float(req.get("timeout", 600)))
        conn.request(req["method"], req["path"], body=base64.b64decode(req.get("body") or ""),
                     headers=dict(req.get("headers") or []))
        resp = conn.getresponse()
        body = resp.read()
        out = {"status": resp.status, "headers": resp.getheaders(), "body": base64.b64encode(body).decode()}
    except (OSError, http.client.HTTPException) as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
