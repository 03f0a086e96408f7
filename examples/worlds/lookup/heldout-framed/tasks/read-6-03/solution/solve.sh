#!/bin/bash
mkdir -p /app
echo tiger > /app/answer.txt
