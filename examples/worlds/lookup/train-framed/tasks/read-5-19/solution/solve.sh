#!/bin/bash
mkdir -p /app
echo pasta > /app/answer.txt
