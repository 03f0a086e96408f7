#!/bin/bash
mkdir -p /app
echo RBMK2L > /app/answer.txt
