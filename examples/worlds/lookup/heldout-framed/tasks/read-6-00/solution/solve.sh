#!/bin/bash
mkdir -p /app
echo panda > /app/answer.txt
