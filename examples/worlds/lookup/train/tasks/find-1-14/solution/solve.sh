#!/bin/bash
mkdir -p /app
echo WA88V3 > /app/answer.txt
