#!/bin/bash
mkdir -p /app
echo WI008X > /app/answer.txt
