#!/bin/bash
mkdir -p /app
echo banana > /app/answer.txt
