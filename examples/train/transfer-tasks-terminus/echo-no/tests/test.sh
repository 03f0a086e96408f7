#!/bin/bash
# Reward 1 when /app/answer.txt holds exactly the word (case and punctuation aside),
# 0.5 when the word is somewhere in it, 0 otherwise: a dense enough signal for a
# 135M model to climb within a few steps.
answer=$(tr -d '[:punct:]' < /app/answer.txt 2>/dev/null | tr '[:upper:]' '[:lower:]' | xargs)
if [ "$answer" = "no" ]; then r=1
elif grep -qiw "no" /app/answer.txt 2>/dev/null; then r=0.5
else r=0; fi
echo $r > /logs/verifier/reward.txt
