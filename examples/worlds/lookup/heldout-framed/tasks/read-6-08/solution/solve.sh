#!/bin/bash
mkdir -p /app
echo whale > /app/answer.txt
