#!/bin/bash
mkdir -p /app
echo planet > /app/answer.txt
