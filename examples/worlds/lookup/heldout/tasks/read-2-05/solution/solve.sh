#!/bin/bash
mkdir -p /app
echo P5R566 > /app/answer.txt
