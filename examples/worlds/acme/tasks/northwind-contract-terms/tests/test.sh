#!/usr/bin/env bash
# Deterministic check; writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PY'
def reward(ok, why=""):
    open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
    print("PASS" if ok else f"FAIL: {why}")

import json
try:
    got = json.load(open("/workspace/output/northwind_terms.json"))
    ok = float(got.get("annual_fee")) == 48000 and int(got.get("notice_days")) == 60 and got.get("renewal_date") == "2025-03-01"
    reward(ok, f"got {got}")
except Exception as exc:
    reward(False, repr(exc))
PY
