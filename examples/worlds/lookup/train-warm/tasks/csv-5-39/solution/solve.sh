#!/bin/bash
mkdir -p /app
echo RP4CP5 > /app/answer.txt
