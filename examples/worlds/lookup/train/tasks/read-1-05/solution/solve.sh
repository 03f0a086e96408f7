#!/bin/bash
mkdir -p /app
echo TS56ZC > /app/answer.txt
