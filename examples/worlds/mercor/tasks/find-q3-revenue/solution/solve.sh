#!/bin/bash
# The oracle: append the message as the chat server would store it.
python3 - <<'PY'
import json, pathlib
f = pathlib.Path("/filesystem/.apps_data/chat/Groups/Space AAQAops/messages.json")
data = json.loads(f.read_text())
data["messages"].append({"creator": {"name": "Agent", "email": "user@example.com"}, "text": "West Q3 revenue: 372,435 USD",
                         "topic_id": "t2", "message_id": "spaces/AAQAops/messages/m3"})
f.write_text(json.dumps(data))
PY
