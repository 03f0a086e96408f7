#!/bin/bash
cat > /app/wordcount.sh <<'SCRIPT'
#!/bin/bash
# Prints the number of words in the file given as the first argument.
wc -w < "$1" | tr -d ' '
SCRIPT
chmod +x /app/wordcount.sh
