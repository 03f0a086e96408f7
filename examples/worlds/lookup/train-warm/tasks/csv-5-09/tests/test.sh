#!/bin/bash
# 1: /app/answer.txt is the value (case, surrounding space and punctuation aside); 0.5: the value is inside an
# answer of at most 200 characters; 0.4 x (the longest common subsequence with the value / its length) for a
# near copy no longer than twice the value that shares at least 4 characters in order with it (a guess does
# not: the value is random and never in the instruction); else 0.
expected="T4KDF8"
norm() { tr -d '[:space:][:punct:]' | tr '[:lower:]' '[:upper:]'; }
answer=$(head -c 4096 /app/answer.txt 2>/dev/null)
a=$(printf %s "$answer" | norm)
if [ "$a" = "$expected" ]; then r=1
elif [ ${#answer} -le 200 ] && printf %s "$answer" | tr '[:lower:]' '[:upper:]' | grep -q "$expected"; then r=0.5
elif [ -n "$a" ] && [ ${#a} -le $(( 2 * ${#expected} )) ]; then
  r=$(awk -v a="$a" -v b="$expected" 'BEGIN { n = length(a); m = length(b)
    for (i = 0; i <= n; i++) L[i, 0] = 0; for (j = 0; j <= m; j++) L[0, j] = 0
    for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
      L[i, j] = substr(a, i, 1) == substr(b, j, 1) ? L[i-1, j-1] + 1 : (L[i-1, j] > L[i, j-1] ? L[i-1, j] : L[i, j-1])
    if (L[n, m] >= 4) printf "%.3f", 0.4 * L[n, m] / m; else print 0 }')
else r=0; fi
mkdir -p /logs/verifier && echo $r > /logs/verifier/reward.txt
