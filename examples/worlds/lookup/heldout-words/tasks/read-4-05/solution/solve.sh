#!/bin/bash
mkdir -p /app
echo indigo > /app/answer.txt
