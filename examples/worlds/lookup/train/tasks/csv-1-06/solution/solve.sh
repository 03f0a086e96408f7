#!/bin/bash
mkdir -p /app
echo 4PZ0LX > /app/answer.txt
