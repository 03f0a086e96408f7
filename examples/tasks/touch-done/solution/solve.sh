#!/bin/bash
mkdir -p /app
touch /app/done.txt
