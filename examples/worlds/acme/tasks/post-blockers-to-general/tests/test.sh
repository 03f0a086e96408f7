#!/usr/bin/env bash
# Deterministic check; writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PY'
def reward(ok, why=""):
    open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
    print("PASS" if ok else f"FAIL: {why}")

import json
try:
    msgs = json.load(open("/workspace/chat/general.json"))
    mine = [m["text"] for m in msgs if m.get("user") == "ops-bot"]
    reward(any("ENG-212" in t and "ENG-219" in t for t in mine), f"ops-bot posted {mine}")
except Exception as exc:
    reward(False, repr(exc))
PY
