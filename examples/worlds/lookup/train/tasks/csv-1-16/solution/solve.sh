#!/bin/bash
mkdir -p /app
echo QCEFB2 > /app/answer.txt
