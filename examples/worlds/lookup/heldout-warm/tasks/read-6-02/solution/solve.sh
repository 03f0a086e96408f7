#!/bin/bash
mkdir -p /app
echo MX5M66 > /app/answer.txt
