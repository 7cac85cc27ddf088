#!/usr/bin/env bash
# rollback.sh HOST_DIR PORT [VERSION] — return to the release that was live before the last
# deploy, or (VERSION) to an earlier release still installed on this host.
. "$(dirname "$0")/_lib.sh"
dir="$1"; port="$2"; version="${3:-previous}"
if [ "$version" != "previous" ]; then
  if [ ! -d "$dir/releases/$version" ]; then
    echo "release $version is not installed on $dir; deploy it instead" >&2
    exit 1
  fi
  stop_server "$dir"
  switch_to "$dir" "$version"
  start_server "$dir" "$port"
  rm -f "$dir/rollback_to"
  echo "rolled back to $version"
  exit 0
fi
if [ ! -f "$dir/rollback_to" ]; then echo "nothing to roll back on $dir"; exit 0; fi
target=$(cat "$dir/rollback_to")
stop_server "$dir"
if [ "$target" = "none" ]; then
  rm -f "$dir/current" "$dir/rollback_to"
  echo "rolled back: no release was live before; server stopped"
  exit 0
fi
switch_to "$dir" "$target"
start_server "$dir" "$port"
rm -f "$dir/rollback_to"
echo "rolled back to $target"
