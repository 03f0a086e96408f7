#!/bin/bash
mkdir -p /app
echo apple > /app/answer.txt
