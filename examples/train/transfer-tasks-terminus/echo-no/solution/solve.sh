#!/bin/bash
mkdir -p /app
echo no > /app/answer.txt
