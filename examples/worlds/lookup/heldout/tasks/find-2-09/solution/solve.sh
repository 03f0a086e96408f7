#!/bin/bash
mkdir -p /app
echo N56XEV > /app/answer.txt
