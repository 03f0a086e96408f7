#!/bin/bash
mkdir -p /app
echo trumpet > /app/answer.txt
