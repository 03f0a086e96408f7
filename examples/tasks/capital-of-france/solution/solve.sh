#!/bin/bash
mkdir -p /app
echo paris > /app/answer.txt
