#!/bin/bash
mkdir -p /app
echo butter > /app/answer.txt
