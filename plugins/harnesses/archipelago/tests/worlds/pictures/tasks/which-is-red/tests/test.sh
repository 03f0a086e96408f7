#!/bin/sh
grep -q "animals/fox.png" /app/answer.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
