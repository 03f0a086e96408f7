#!/bin/bash
mkdir -p /app
echo GS86VS > /app/answer.txt
