#!/bin/bash
mkdir -p /app
echo WCTX9R > /app/answer.txt
