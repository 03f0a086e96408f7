#!/bin/bash
mkdir -p /app
echo WAYGU8 > /app/answer.txt
