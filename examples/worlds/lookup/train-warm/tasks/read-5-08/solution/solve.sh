#!/bin/bash
mkdir -p /app
echo XJVR8F > /app/answer.txt
