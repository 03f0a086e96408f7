#!/bin/bash
mkdir -p /app
echo KKSUM8 > /app/answer.txt
