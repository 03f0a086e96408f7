#!/usr/bin/env bash
# Deterministic check; writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PY'
def reward(ok, why=""):
    open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
    print("PASS" if ok else f"FAIL: {why}")

import csv
want = ["EXP-007", "EXP-009", "EXP-014", "EXP-027", "EXP-028", "EXP-029", "EXP-031", "EXP-033", "EXP-035",
        "EXP-036", "EXP-037", "EXP-039", "EXP-040"]
try:
    rows = list(csv.DictReader(open("/workspace/output/over_limit.csv")))
    reward([r["id"] for r in rows] == want and all(float(r["amount"]) > 500 for r in rows), f"got {[r.get('id') for r in rows]}")
except Exception as exc:
    reward(False, repr(exc))
PY
