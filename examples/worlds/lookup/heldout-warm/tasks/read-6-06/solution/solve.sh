#!/bin/bash
mkdir -p /app
echo 7AMKBV > /app/answer.txt
