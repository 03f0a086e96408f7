#!/bin/bash
mkdir -p /app
echo koala > /app/answer.txt
