#!/bin/bash
mkdir -p /app
echo 0H9XC9 > /app/answer.txt
