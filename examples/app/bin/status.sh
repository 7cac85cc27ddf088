#!/usr/bin/env bash
# status.sh HOST_DIR PORT — which release is live and whether it is healthy (read-only).
. "$(dirname "$0")/_lib.sh"
echo "current: $(basename "$(readlink "$1/current" 2>/dev/null || echo none)")"
echo "health: $(http_get "$(recorded_port "$1" "$2")" /health)"
