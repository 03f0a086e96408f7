#!/bin/bash
mkdir -p /app
echo island > /app/answer.txt
