#!/bin/bash
mkdir -p /app
echo T4KDF8 > /app/answer.txt
