#!/bin/bash
mkdir -p /app
echo J4BH2P > /app/answer.txt
