#!/bin/bash
mkdir -p /app
echo RS3U54 > /app/answer.txt
