#!/bin/bash
mkdir -p /app
echo carrot > /app/answer.txt
