#!/bin/bash
mkdir -p /app
echo parrot > /app/answer.txt
