#!/bin/bash
mkdir -p /app
echo Y11O5S > /app/answer.txt
