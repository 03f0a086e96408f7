#!/bin/bash
mkdir -p /app
echo violin > /app/answer.txt
