#!/bin/bash
mkdir -p /app
echo 9N1D4X > /app/answer.txt
