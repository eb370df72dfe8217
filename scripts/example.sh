#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the two main jobs:
# - a small GPT trained on mtia to add numbers, sampled, saved and reloaded,
#   deployed with AOTInductor; --check also runs a short fixed-seed CPU twin
#   and fails if the mtia losses differ (arguments go to examples/gpt.py);
# - a DLRM trained with TorchRec on mtia (sharded tables, the sparse-dist
#   pipeline, a fused optimizer) on synthetic clicks; --check also trains its
#   CPU twin and fails if the held-out AUCs differ.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/gpt.py --check "$@"
.venv/bin/python examples/dlrm.py --check
