#!/usr/bin/env bash
# Deterministic check; writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
python3 - <<'PY'
def reward(ok, why=""):
    open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
    print("PASS" if ok else f"FAIL: {why}")

import mailbox
try:
    sent = list(mailbox.mbox("/workspace/mail/sent.mbox"))
    def body(m):
        p = m.get_payload(decode=True) if not m.is_multipart() else next(x for x in m.walk() if x.get_content_type() == "text/plain").get_payload(decode=True)
        return (p or b"").decode(errors="replace")
    hits = [m for m in sent if "dana@brightline.example" in (m["to"] or "") and (m["subject"] or "").lower().startswith("re:")
            and ("2024-10-18" in body(m) or "October 18" in body(m))]
    reward(bool(hits), f"{len(sent)} sent messages, none matched")
except Exception as exc:
    reward(False, repr(exc))
PY
