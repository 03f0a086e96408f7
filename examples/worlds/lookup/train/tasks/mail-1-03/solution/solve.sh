#!/bin/bash
mkdir -p /app
echo SB09GL > /app/answer.txt
