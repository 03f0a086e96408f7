#!/bin/bash
mkdir -p /app
echo RS4ZJH > /app/answer.txt
