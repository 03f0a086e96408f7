#!/bin/bash
# Short answer: reward 1 when /app/answer.txt names the answer as a word (any case, any words around it).
if grep -qiw 'blue' /app/answer.txt 2>/dev/null; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
