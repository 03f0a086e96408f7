#!/bin/bash
mkdir -p /app
echo bridge > /app/answer.txt
