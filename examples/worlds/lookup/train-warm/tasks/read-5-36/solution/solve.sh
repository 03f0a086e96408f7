#!/bin/bash
mkdir -p /app
echo 0BUT5S > /app/answer.txt
