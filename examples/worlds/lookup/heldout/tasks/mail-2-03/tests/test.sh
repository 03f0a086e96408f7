#!/bin/bash
# 1: /app/answer.txt is the value (case, surrounding space and punctuation aside); 0.5: the value is inside an
# answer of at most 200 characters; else 0. The value is here only, never in the instruction.
expected="9L207X"
norm() { tr -d '[:space:][:punct:]' | tr '[:lower:]' '[:upper:]'; }
answer=$(head -c 4096 /app/answer.txt 2>/dev/null)
if [ "$(printf %s "$answer" | norm)" = "$expected" ]; then r=1
elif [ ${#answer} -le 200 ] && printf %s "$answer" | tr '[:lower:]' '[:upper:]' | grep -q "$expected"; then r=0.5
else r=0; fi
mkdir -p /logs/verifier && echo $r > /logs/verifier/reward.txt
