#!/bin/bash
echo 'Hello, tackroom!' > /app/greeting.txt
