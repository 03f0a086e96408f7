#!/bin/bash
mkdir -p /app
echo JD0SJ3 > /app/answer.txt
