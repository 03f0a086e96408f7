#!/bin/bash
mkdir -p /app
echo LYKEI2 > /app/answer.txt
