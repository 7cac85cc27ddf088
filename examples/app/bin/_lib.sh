# Shared helpers for the sample app's scripts. Sourced, not run.
set -eu

http_get() {  # http_get PORT PATH -> prints "STATUS BODY"
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=2) as r:
        print(r.status, r.read().decode().strip())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())
except OSError as e:
    print(0, e)
PY
}

alive() {  # alive PID — running, and not a zombie waiting to be reaped
  state=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != "Z" ]
}

stop_server() {  # stop_server HOST_DIR
  pidfile="$1/server.pid"
  if [ -f "$pidfile" ]; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done
    rm -f "$pidfile"
  fi
}

start_server() {  # start_server HOST_DIR PORT
  # setsid + redirects: the server outlives this script and never holds its output pipe.
  setsid python3 "$1/current/server.py" --port "$2" >"$1/server.log" 2>&1 </dev/null &
  echo $! > "$1/server.pid"
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "server on port $2 did not start; see $1/server.log" >&2
  return 1
}

writable() {  # writable PATH — PATH, or its nearest existing parent, can be written (no mkdir)
  p="$1"
  while [ ! -e "$p" ]; do p=$(dirname "$p"); done
  [ -w "$p" ]
}

switch_to() {  # switch_to HOST_DIR RELEASE_NAME  (atomic symlink swap)
  ln -sfn "releases/$2" "$1/current.new"
  mv -T "$1/current.new" "$1/current"
}
