#!/bin/bash
mkdir -p /app
echo K9LPOB > /app/answer.txt
