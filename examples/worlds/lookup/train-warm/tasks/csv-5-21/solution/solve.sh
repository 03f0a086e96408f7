#!/bin/bash
mkdir -p /app
echo WWRW0W > /app/answer.txt
