#!/bin/bash
mkdir -p /app
echo blue > /app/answer.txt
