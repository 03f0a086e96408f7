#!/bin/bash
mkdir -p /app
echo BTYV0M > /app/answer.txt
