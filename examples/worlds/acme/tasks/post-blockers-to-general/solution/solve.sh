#!/usr/bin/env bash
# Oracle: post the message the way the chat app stores it.
set -euo pipefail
mkdir -p /workspace/chat
python3 - <<'PY'
import json, os
path = "/workspace/chat/general.json"
msgs = json.load(open(path)) if os.path.exists(path) else []
msgs.append({"ts": "2024-10-14 10:00", "user": "ops-bot",
             "text": "Blockers from standup: ENG-212 (Farid Haddad, Heron scanner SDK license) and ENG-219 (Wen Zhou, staging database out of disk)."})
json.dump(msgs, open(path, "w"), indent=2)
PY
