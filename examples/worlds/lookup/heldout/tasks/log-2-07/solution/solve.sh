#!/bin/bash
mkdir -p /app
echo OUKR4T > /app/answer.txt
