#!/bin/bash
mkdir -p /app
echo river > /app/answer.txt
