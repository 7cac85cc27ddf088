#!/usr/bin/env bash
# build.sh VERSION ARTIFACTS_DIR — build a release artifact (what `docker build` does in a real setup).
. "$(dirname "$0")/_lib.sh"
if [ "${1:-}" = "--check" ]; then  # dry run: the sources are there; where it would go
  shift; [ -f "$(dirname "$0")/../src/server.py" ] || { echo "no sources" >&2; exit 1; }
  echo "would build $1"
  echo "artifact=$2/$1"
  exit 0
fi
version="$1"; out="$2/$version"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
cp "$(dirname "$0")/../src/server.py" "$out.tmp/"
printf '%s\n' "$version" > "$out.tmp/VERSION"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "built $version"
echo "artifact=$out"
