#!/bin/bash
mkdir -p /app
echo 5R696X > /app/answer.txt
