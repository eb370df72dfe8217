#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job: a small GPT trained on mtia
# to add numbers, sampled, saved and reloaded; --check also runs a short
# fixed-seed CPU twin and fails if the mtia losses differ.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/gpt.py --check "$@"
