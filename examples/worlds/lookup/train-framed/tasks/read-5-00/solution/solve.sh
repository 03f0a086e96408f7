#!/bin/bash
mkdir -p /app
echo onion > /app/answer.txt
