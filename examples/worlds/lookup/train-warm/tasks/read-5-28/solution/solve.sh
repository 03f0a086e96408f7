#!/bin/bash
mkdir -p /app
echo 03WYEN > /app/answer.txt
