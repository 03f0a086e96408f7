#!/bin/bash
mkdir -p /app
echo shark > /app/answer.txt
