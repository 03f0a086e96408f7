#!/bin/bash
mkdir -p /app
echo rocket > /app/answer.txt
