#!/bin/bash
mkdir -p /app
echo mango > /app/answer.txt
