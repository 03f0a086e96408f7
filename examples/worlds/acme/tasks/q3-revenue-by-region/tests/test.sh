#!/usr/bin/env bash
# Deterministic check; writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PY'
def reward(ok, why=""):
    open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
    print("PASS" if ok else f"FAIL: {why}")

import csv
want = {"East": 209355.00, "North": 212595.00, "South": 365550.00, "West": 372435.00}
try:
    rows = list(csv.DictReader(open("/workspace/output/revenue_by_region.csv")))
    got = {r["region"].strip(): float(r["revenue"]) for r in rows}
    reward(set(got) == set(want) and all(abs(got[k] - v) < 0.01 for k, v in want.items()), f"got {got}")
except Exception as exc:
    reward(False, repr(exc))
PY
