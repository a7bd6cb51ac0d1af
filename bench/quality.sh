#!/usr/bin/env bash
# Quality side by side with OpenNMT-py 3.5.1 (see bench/quality.py): bench/quality.sh g2p|ende
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python bench/quality.py "$@"
