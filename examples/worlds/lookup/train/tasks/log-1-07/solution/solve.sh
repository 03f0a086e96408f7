#!/bin/bash
mkdir -p /app
echo XF26GK > /app/answer.txt
