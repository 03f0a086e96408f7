#!/bin/bash
mkdir -p /app
echo 9M605W > /app/answer.txt
