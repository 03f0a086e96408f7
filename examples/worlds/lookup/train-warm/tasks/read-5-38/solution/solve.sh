#!/bin/bash
mkdir -p /app
echo IZA489 > /app/answer.txt
