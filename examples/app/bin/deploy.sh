#!/usr/bin/env bash
# deploy.sh ARTIFACT VERSION HOST_DIR PORT — install a release, switch `current`, restart.
. "$(dirname "$0")/_lib.sh"
artifact="$1"; version="$2"; dir="$3"; port="$4"
mkdir -p "$dir/releases"
rm -rf "$dir/releases/$version.tmp"
cp -R "$artifact" "$dir/releases/$version.tmp"
rm -rf "$dir/releases/$version" && mv "$dir/releases/$version.tmp" "$dir/releases/$version"
previous=$(basename "$(readlink "$dir/current" 2>/dev/null || echo none)")
if [ "$previous" != "$version" ]; then
  # what rollback.sh returns to if this deploy must be undone
  printf '%s\n' "$previous" > "$dir/rollback_to"
fi
switch_to "$dir" "$version"
stop_server "$dir"
start_server "$dir" "$port"
echo "deployed $version on port $port (was $previous)"
