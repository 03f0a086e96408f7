#!/bin/bash
if [ "$(cat /app/state.txt 2>/dev/null)" = "ready" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
