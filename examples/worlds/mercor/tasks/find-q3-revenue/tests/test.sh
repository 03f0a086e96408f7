#!/bin/bash
# The West figure was posted to the ops channel (the chat server writes messages.json).
mkdir -p /logs/verifier
if grep -q '372,435' "/filesystem/.apps_data/chat/Groups/Space AAQAops/messages.json" \
   && [ "$(grep -o '"message_id"' "/filesystem/.apps_data/chat/Groups/Space AAQAops/messages.json" | wc -l)" -eq 3 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
