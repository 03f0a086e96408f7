#!/bin/bash
mkdir -p /app
echo 1VFX0Q > /app/answer.txt
