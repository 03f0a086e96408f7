#!/bin/bash
mkdir -p /app
echo piano > /app/answer.txt
