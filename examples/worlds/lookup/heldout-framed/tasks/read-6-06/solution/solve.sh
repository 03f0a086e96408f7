#!/bin/bash
mkdir -p /app
echo monkey > /app/answer.txt
