#!/bin/bash
mkdir -p /app
echo honey > /app/answer.txt
