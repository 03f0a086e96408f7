#!/bin/bash
mkdir -p /app
echo purple > /app/answer.txt
