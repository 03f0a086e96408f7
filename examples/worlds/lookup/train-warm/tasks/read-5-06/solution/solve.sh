#!/bin/bash
mkdir -p /app
echo 6W7Q3G > /app/answer.txt
