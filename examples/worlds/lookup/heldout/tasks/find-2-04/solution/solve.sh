#!/bin/bash
mkdir -p /app
echo WX2KZ3 > /app/answer.txt
