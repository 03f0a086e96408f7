#!/bin/bash
mkdir -p /app
echo 9OZ6WW > /app/answer.txt
