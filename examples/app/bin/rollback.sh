#!/usr/bin/env bash
# rollback.sh HOST_DIR PORT — return to the release that was live before the last deploy.
. "$(dirname "$0")/_lib.sh"
dir="$1"; port="$2"
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
