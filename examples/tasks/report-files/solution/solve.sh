#!/bin/bash
set -e
mkdir -p /app/report
echo '# Quarterly report' > /app/report/summary.md
seq 1 10 > /app/report/numbers.txt
echo '{"status": "done"}' > /app/report/status.json
