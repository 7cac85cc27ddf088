#!/usr/bin/env bash
# smoke.sh HOST_DIR PORT VERSION — this host's app answers with VERSION, is healthy, and is
# the server this deployment started (its /health names the host's instance token).
. "$(dirname "$0")/_lib.sh"
dir="$1"; port=$(recorded_port "$1" "$2"); expected="$3"
got=$(http_get "$port" /version)
health=$(http_get "$port" /health)
echo "GET /version -> $got"
echo "GET /health -> $health"
[ "$got" = "200 $expected" ] || { echo "expected version $expected" >&2; exit 1; }
[ "${health%% *}" = "200" ] || { echo "health check failed" >&2; exit 1; }
token=$(cat "$dir/instance" 2>/dev/null || echo none)
case "$health" in
  *"instance=$token"*) ;;
  *) echo "port $port answers for another deployment (not instance $token)" >&2; exit 1 ;;
esac
