#!/bin/bash
mkdir -p /app
echo SHV616 > /app/answer.txt
