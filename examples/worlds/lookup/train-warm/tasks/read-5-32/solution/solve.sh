#!/bin/bash
mkdir -p /app
echo KY4MIF > /app/answer.txt
