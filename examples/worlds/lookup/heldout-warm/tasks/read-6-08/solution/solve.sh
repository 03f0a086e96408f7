#!/bin/bash
mkdir -p /app
echo 5DL1ZG > /app/answer.txt
