#!/bin/bash
# One command: reward 1 when /app/done.txt exists as a regular file.
if [ -f /app/done.txt ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
