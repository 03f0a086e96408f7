#!/bin/bash
mkdir -p /app
echo B90XYA > /app/answer.txt
