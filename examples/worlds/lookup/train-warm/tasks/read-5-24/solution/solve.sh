#!/bin/bash
mkdir -p /app
echo 0K70T9 > /app/answer.txt
