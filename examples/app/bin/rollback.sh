#!/usr/bin/env bash
# rollback.sh HOST_DIR PORT [VERSION] — return to the release that was live before the last
# deploy, or (VERSION) to a named release this host ran before.
. "$(dirname "$0")/_lib.sh"
dir="$1"; port=$(port_for "$1" "$2"); want="${3:-previous}"
if [ "$want" != "previous" ]; then
  if [ ! -d "$dir/releases/$want" ]; then
    echo "$want never ran on $dir; releases here: $(ls "$dir/releases" 2>/dev/null | tr '\n' ' ')" >&2
    exit 1
  fi
  basename "$(readlink "$dir/current" 2>/dev/null || echo none)" > "$dir/rollback_to"
  stop_server "$dir"
  switch_to "$dir" "$want"
  start_server "$dir" "$port"
  echo "rolled back to $want"
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
