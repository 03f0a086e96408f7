#!/bin/bash
# A made-up fact: nothing outside this task says what the answer is, so a model
# knows it only if training taught it. Reward 1 when /app/answer.txt holds exactly
# "yes" (case and punctuation aside), 0.5 when "yes" is among at most four words
# and "no" is not (hedging with both earns nothing), 0 otherwise.
words=$(tr -d '[:punct:]' < /app/answer.txt 2>/dev/null | tr '[:upper:]' '[:lower:]' | xargs)
n=$(echo "$words" | wc -w)
if [ "$words" = "yes" ]; then r=1
elif echo " $words " | grep -qw "yes" && ! echo " $words " | grep -qw "no" && [ "$n" -le 4 ]; then r=0.5
else r=0; fi
echo $r > /logs/verifier/reward.txt
