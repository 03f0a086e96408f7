#!/usr/bin/env bash
# Oracle: put the reference answer files in place (they mirror sandbox paths under files/).
set -euo pipefail
cp -r /solution/files/. /
