#!/bin/bash
mkdir -p /app
echo lemon > /app/answer.txt
