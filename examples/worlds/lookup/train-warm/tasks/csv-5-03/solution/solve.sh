#!/bin/bash
mkdir -p /app
echo WT4UL4 > /app/answer.txt
