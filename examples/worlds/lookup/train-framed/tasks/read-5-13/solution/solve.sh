#!/bin/bash
mkdir -p /app
echo ginger > /app/answer.txt
