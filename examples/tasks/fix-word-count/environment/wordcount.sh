#!/bin/bash
# Prints the number of words in the file given as the first argument.
wc -l < "$2"
