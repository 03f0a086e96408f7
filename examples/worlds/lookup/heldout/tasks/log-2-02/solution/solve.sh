#!/bin/bash
mkdir -p /app
echo LI66X6 > /app/answer.txt
