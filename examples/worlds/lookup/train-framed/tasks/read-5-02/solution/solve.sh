#!/bin/bash
mkdir -p /app
echo spider > /app/answer.txt
