#!/bin/bash
mkdir -p /app
echo 8L5VLF > /app/answer.txt
