#!/usr/bin/env bash
# Deterministic check; writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PY'
def reward(ok, why=""):
    open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
    print("PASS" if ok else f"FAIL: {why}")

import re, zipfile
want = [["Department", "Employees"], ["Engineering", "6"], ["Finance", "6"], ["Operations", "6"], ["Sales", "6"]]
try:
    z = zipfile.ZipFile("/workspace/output/headcount.xlsx")
    wb = z.read("xl/workbook.xml").decode()
    names = re.findall(r'<sheet [^>]*name="([^"]+)"', wb)
    idx = names.index("Headcount") + 1
    rels = z.read("xl/_rels/workbook.xml.rels").decode()
    rid = re.findall(r'<sheet [^>]*name="Headcount"[^>]*r:id="([^"]+)"', wb)[0]
    target = re.search(r'Id="%s"[^>]*Target="([^"]+)"|Target="([^"]+)"[^>]*Id="%s"' % (rid, rid), rels)
    target = (target.group(1) or target.group(2)).lstrip("/").removeprefix("xl/")
    sheet = z.read("xl/" + target).decode()
    shared = []
    if "xl/sharedStrings.xml" in z.namelist():
        shared = [re.sub(r"<[^>]+>", "", si) for si in re.findall(r"<si>(.*?)</si>", z.read("xl/sharedStrings.xml").decode(), re.S)]
    rows = []
    for row in re.findall(r"<row[^>]*>(.*?)</row>", sheet, re.S):
        vals = []
        for attrs, body in re.findall(r"<c([^>]*)>(.*?)</c>", row, re.S):
            v = re.search(r"<v>(.*?)</v>", body)
            t = re.search(r"<t[^>]*>(.*?)</t>", body)
            if 't="s"' in attrs and v:
                vals.append(shared[int(v.group(1))])
            elif t:
                vals.append(t.group(1))
            elif v:
                x = v.group(1)
                vals.append(str(int(float(x))) if re.fullmatch(r"-?\d+(\.0+)?", x) else x)
        rows.append(vals)
    reward(rows == want, f"got {rows}")
except Exception as exc:
    reward(False, repr(exc))
PY
