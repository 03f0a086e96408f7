#!/bin/bash
mkdir -p /app
echo violet > /app/answer.txt
