#!/bin/bash
mkdir -p /app
echo dolphin > /app/answer.txt
