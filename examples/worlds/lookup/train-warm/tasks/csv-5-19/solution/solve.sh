#!/bin/bash
mkdir -p /app
echo 5QSVLA > /app/answer.txt
