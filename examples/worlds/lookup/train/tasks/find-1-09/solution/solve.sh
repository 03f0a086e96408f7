#!/bin/bash
mkdir -p /app
echo ZKK6OA > /app/answer.txt
