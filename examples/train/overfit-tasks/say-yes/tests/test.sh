#!/bin/bash
# Reward 1 when /app/answer.txt holds exactly the word.
if [ "$(tr -d "[:space:]" < /app/answer.txt 2>/dev/null)" = "yes" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
