#!/bin/bash
mkdir -p /app
echo cookie > /app/answer.txt
