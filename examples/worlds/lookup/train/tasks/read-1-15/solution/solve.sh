#!/bin/bash
mkdir -p /app
echo OL9LF9 > /app/answer.txt
