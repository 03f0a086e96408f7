#!/bin/bash
mkdir -p /app
echo pizza > /app/answer.txt
