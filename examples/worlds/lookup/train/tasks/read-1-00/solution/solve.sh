#!/bin/bash
mkdir -p /app
echo UBBB8A > /app/answer.txt
