#!/bin/bash
mkdir -p /app
echo DC5VNI > /app/answer.txt
