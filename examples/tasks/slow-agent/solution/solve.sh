#!/bin/bash
echo ready > /app/state.txt
sleep 600
