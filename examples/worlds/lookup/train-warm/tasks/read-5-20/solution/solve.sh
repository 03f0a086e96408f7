#!/bin/bash
mkdir -p /app
echo QUR3S6 > /app/answer.txt
