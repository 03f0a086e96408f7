#!/bin/bash
mkdir -p /app
echo F67MHR > /app/answer.txt
