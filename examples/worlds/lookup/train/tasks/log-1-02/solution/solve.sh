#!/bin/bash
mkdir -p /app
echo 59OWOO > /app/answer.txt
