#!/bin/bash
mkdir -p /app
echo 2CLMHP > /app/answer.txt
