#!/bin/bash
mkdir -p /app
echo garlic > /app/answer.txt
