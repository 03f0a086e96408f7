#!/bin/bash
mkdir -p /app
echo 9TXY7Y > /app/answer.txt
