#!/bin/bash
# Reward 1 only when the file holds exactly the requested line.
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "Hello, tackroom!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
