#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job: train a small model on mtia
# and check it matches the same run on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/train.py "$@"
