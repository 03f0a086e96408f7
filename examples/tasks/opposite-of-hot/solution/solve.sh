#!/bin/bash
mkdir -p /app
echo cold > /app/answer.txt
