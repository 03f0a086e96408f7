#!/bin/bash
printf 'one two three\nfour  five\n\nsix\n' > /tmp/words.txt
out=$(/app/wordcount.sh /tmp/words.txt 2>/dev/null | tr -d ' ')
if [ "$out" = "6" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
