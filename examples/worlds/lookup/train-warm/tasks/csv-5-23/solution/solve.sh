#!/bin/bash
mkdir -p /app
echo KMX4SF > /app/answer.txt
