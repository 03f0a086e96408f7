#!/bin/bash
mkdir -p /app
echo IHUL4M > /app/answer.txt
