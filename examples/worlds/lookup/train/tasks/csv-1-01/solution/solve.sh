#!/bin/bash
mkdir -p /app
echo YN1B7O > /app/answer.txt
