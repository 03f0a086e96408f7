#!/bin/bash
mkdir -p /app
echo melon > /app/answer.txt
