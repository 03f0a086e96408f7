#!/bin/bash
mkdir -p /app
echo 3R9AY6 > /app/answer.txt
