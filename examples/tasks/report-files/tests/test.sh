#!/bin/bash
# One metric per file; the overall reward is their mean.
summary=0; numbers=0; status=0
[ "$(head -n1 /app/report/summary.md 2>/dev/null)" = "# Quarterly report" ] && summary=1
[ "$(cat /app/report/numbers.txt 2>/dev/null)" = "$(seq 1 10)" ] && numbers=1
grep -Eq '^\{ *"status" *: *"done" *\} *$' /app/report/status.json 2>/dev/null && status=1
reward=$(awk -v a=$summary -v b=$numbers -v c=$status 'BEGIN {printf "%.4f", (a+b+c)/3}')
printf '{"reward": %s, "summary": %d, "numbers": %d, "status": %d}\n' "$reward" $summary $numbers $status \
  > /logs/verifier/reward.json
