#!/bin/bash
mkdir -p /app
echo 2XV7J7 > /app/answer.txt
