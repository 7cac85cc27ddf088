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

port_for() {  # port_for HOST_DIR PREFERRED — the port recorded for this host, else a free one
  # Recorded in the workspace (HOST_DIR/port) on first use, so another checkout's servers on
  # the preferred port never make this one's deploy "succeed" against the wrong app.
  if [ -s "$1/port" ]; then cat "$1/port"; return 0; fi
  mkdir -p "$1"
  python3 - "$2" > "$1/port" <<'PY'
import socket, sys
def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port)); return s.getsockname()[1]
        except OSError:
            return None
print(free(int(sys.argv[1])) or free(0))
PY
  cat "$1/port"
}

recorded_port() {  # recorded_port HOST_DIR PORT — for read-only scripts: never records
  if [ -s "$1/port" ]; then cat "$1/port"; else echo "$2"; fi
}

instance_of() {  # instance_of HOST_DIR — this host's instance token (made once, kept)
  [ -s "$1/instance" ] || python3 -c 'import secrets; print(secrets.token_hex(8))' > "$1/instance"
  cat "$1/instance"
}

start_server() {  # start_server HOST_DIR PORT
  # setsid + redirects: the server outlives this script and never holds its output pipe.
  token=$(instance_of "$1")
  setsid python3 "$1/current/server.py" --port "$2" --instance "$token" \
    >"$1/server.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" > "$1/server.pid"
  for _ in $(seq 1 100); do
    # Ours, not merely someone's: the process lives and /health names our instance.
    alive "$pid" || break
    case "$(http_get "$2" /health)" in *"instance=$token"*) return 0 ;; esac
    sleep 0.05
  done
  echo "server on port $2 did not start; see $1/server.log:" >&2
  tail -n 3 "$1/server.log" >&2 || true
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
