#!/bin/bash
mkdir -p /app
echo W33W93 > /app/answer.txt
