#!/bin/bash
mkdir -p /app
echo 2PF22Y > /app/answer.txt
