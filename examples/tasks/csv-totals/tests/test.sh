#!/bin/bash
expected=$'region,total\neast,15\nnorth,150\nsouth,100\nwest,300'
if [ "$(cat /app/totals.csv 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
