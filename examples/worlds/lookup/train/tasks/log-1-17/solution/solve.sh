#!/bin/bash
mkdir -p /app
echo SEKKQ7 > /app/answer.txt
