#!/bin/bash
mkdir -p /app
echo BXP1TW > /app/answer.txt
