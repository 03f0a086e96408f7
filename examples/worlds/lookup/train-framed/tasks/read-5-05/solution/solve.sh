#!/bin/bash
mkdir -p /app
echo donkey > /app/answer.txt
