#!/usr/bin/env bash
# deploy.sh ARTIFACT VERSION HOST_DIR PORT — install a release, switch `current`, restart.
. "$(dirname "$0")/_lib.sh"
if [ "${1:-}" = "--check" ]; then  # dry run: say what would change, change nothing
  shift; version="$2"; dir="$3"
  live=$(basename "$(readlink "$dir/current" 2>/dev/null || echo none)")
  writable "$dir" || { echo "cannot write to $dir" >&2; exit 1; }
  echo "would install $version on $dir and switch from $live to $version"
  exit 0
fi
artifact="$1"; version="$2"; dir="$3"; port="$4"
mkdir -p "$dir/releases"
# What rollback.sh returns to if this deploy must be undone: recorded before anything
# changes, so a deploy that fails half-way is rolled back to what was live, not older.
previous=$(basename "$(readlink "$dir/current" 2>/dev/null || echo none)")
printf '%s\n' "$previous" > "$dir/rollback_to"
rm -rf "$dir/releases/$version.tmp"
cp -R "$artifact" "$dir/releases/$version.tmp"
rm -rf "$dir/releases/$version" && mv "$dir/releases/$version.tmp" "$dir/releases/$version"
switch_to "$dir" "$version"
stop_server "$dir"
start_server "$dir" "$port"
echo "deployed $version on port $port (was $previous)"
