#!/bin/bash
mkdir -p /app
echo guitar > /app/answer.txt
