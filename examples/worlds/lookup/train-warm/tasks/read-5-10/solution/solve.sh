#!/bin/bash
mkdir -p /app
echo PWQ30J > /app/answer.txt
