#!/bin/bash
mkdir -p /app
echo X3UY17 > /app/answer.txt
