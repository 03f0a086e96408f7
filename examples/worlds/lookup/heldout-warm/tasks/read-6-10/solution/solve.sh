#!/bin/bash
mkdir -p /app
echo 14T0FM > /app/answer.txt
