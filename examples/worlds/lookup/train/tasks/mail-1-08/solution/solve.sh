#!/bin/bash
mkdir -p /app
echo ZX5B4C > /app/answer.txt
