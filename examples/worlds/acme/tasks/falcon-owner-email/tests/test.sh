#!/usr/bin/env bash
# Deterministic check; writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PY'
def reward(ok, why=""):
    open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
    print("PASS" if ok else f"FAIL: {why}")

try:
    text = open("/workspace/output/falcon_owner.txt").read().strip()
    reward(text == "priya.natarajan@acme-widgets.example", f"got {text!r}")
except Exception as exc:
    reward(False, repr(exc))
PY
