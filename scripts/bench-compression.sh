#!/usr/bin/env bash
# bench-compression.sh — compression of a synthetic 100k-token history (issue 4).
#
# Runs host/benches/compression.rs (the fake `llm` import of the compression tests): the
# builtin llm-summarizer with a large window (one summary request) and with an 8192-token
# window (chunked summary requests), and builtin:observation-masking (no LLM). Each line
# prints messages, tokens and bytes before, tokens after, time spent outside the LLM, requests,
# guest memory peak, process peak RSS, and bytes read/written.
#
# Run: scripts/bench-compression.sh        (dev profile; a few seconds once built)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
exec cargo bench -q -p ctxhost --bench compression --profile dev
