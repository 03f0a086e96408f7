#!/bin/bash
mkdir -p /app
echo XSC1FN > /app/answer.txt
