#!/bin/bash
mkdir -p /app
echo olive > /app/answer.txt
