#!/usr/bin/env bash
# Build {{crate}}.wasm from app.py with componentize-py (pip install componentize-py==0.25.1).
# componentize generates the world's Python bindings (wit_world) itself; for an editor's type
# hints run once: componentize-py -d wit -w strategy-plugin bindings .
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
COMPONENTIZE_PY="${COMPONENTIZE_PY:-componentize-py}"
"$COMPONENTIZE_PY" -d wit -w strategy-plugin componentize app -o {{crate}}.wasm
echo "built {{crate}}.wasm; check it with: ctxhost plugin check {{crate}}.wasm"
