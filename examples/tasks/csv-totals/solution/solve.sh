#!/bin/bash
set -e
{
  echo "region,total"
  tail -n +2 "$DATA_DIR/sales.csv" | awk -F, '{s[$1]+=$2} END {for (r in s) print r "," s[r]}' | sort
} > /app/totals.csv
