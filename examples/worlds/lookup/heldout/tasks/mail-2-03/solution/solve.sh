#!/bin/bash
mkdir -p /app
echo 9L207X > /app/answer.txt
