#!/usr/bin/env bash
# Deterministic check; writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PY'
def reward(ok, why=""):
    open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
    print("PASS" if ok else f"FAIL: {why}")

import json, re, zipfile
facts = json.load(open("/tests/facts.json"))
try:
    xml = zipfile.ZipFile("/workspace/output/q3_memo.docx").read("word/document.xml").decode()
    text = " ".join(re.findall(r"<w:t[^>]*>([^<]*)</w:t>", xml))
    digits = re.sub(r"[,$ ]", "", text)
    ok = ("Q3 Sales Summary" in text and facts["top_region"] in text
          and str(int(facts["total_revenue"])) in digits)
    reward(ok, f"text was {text[:300]!r}")
except Exception as exc:
    reward(False, repr(exc))
PY
