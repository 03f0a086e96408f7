#!/bin/bash
mkdir -p /app
echo orange > /app/answer.txt
