#!/bin/bash
mkdir -p /app
echo R25LBB > /app/answer.txt
