#!/bin/bash
mkdir -p /app
echo 2GMSGC > /app/answer.txt
