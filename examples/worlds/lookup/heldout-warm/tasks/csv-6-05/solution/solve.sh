#!/bin/bash
mkdir -p /app
echo TMY4OI > /app/answer.txt
