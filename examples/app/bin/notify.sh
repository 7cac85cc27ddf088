#!/usr/bin/env bash
# notify.sh LOG MESSAGE — tell the team (appends to LOG; a real setup posts to chat or email).
. "$(dirname "$0")/_lib.sh"
mkdir -p "$(dirname "$1")"
printf '%s %s\n' "$(date -u +%FT%TZ)" "$2" >> "$1"
echo "notified: $2"
