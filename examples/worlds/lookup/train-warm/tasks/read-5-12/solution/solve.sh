#!/bin/bash
mkdir -p /app
echo I0GK1X > /app/answer.txt
