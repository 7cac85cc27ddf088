#!/usr/bin/env bash
# smoke.sh PORT VERSION — the app answers with VERSION and reports healthy.
. "$(dirname "$0")/_lib.sh"
port="$1"; expected="$2"
got=$(http_get "$port" /version)
health=$(http_get "$port" /health)
echo "GET /version -> $got"
echo "GET /health -> $health"
[ "$got" = "200 $expected" ] || { echo "expected version $expected" >&2; exit 1; }
[ "${health%% *}" = "200" ] || { echo "health check failed" >&2; exit 1; }
