#!/usr/bin/env bash
# build.sh VERSION ARTIFACTS_DIR — build a release artifact (what `docker build` does in a real setup).
. "$(dirname "$0")/_lib.sh"
version="$1"; out="$2/$version"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
cp "$(dirname "$0")/../src/server.py" "$out.tmp/"
printf '%s\n' "$version" > "$out.tmp/VERSION"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "built $version"
echo "artifact=$out"
