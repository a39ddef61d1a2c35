#!/usr/bin/env bash
# check_resume_llama.sh: scripts/check_resume.sh on a Llama model (llama-tiny: grouped-query attention, RoPE,
# RMSNorm, SwiGLU, an untied head) under nvfp4: resuming continues bit for bit, also after a kill -9 mid-checkpoint,
# and the checkpoint records the family (a resume without --model finds llama-tiny's shape in it). GPU; skips
# without one, as check_resume.sh does.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHECK_DIR=${CHECK_DIR:-/tmp/check_resume_llama} exec scripts/check_resume.sh --model llama-tiny --recipe nvfp4 "$@"
