#!/usr/bin/env bash
# stop.sh HOST_DIR — stop the app server on this host (used by the demo and tests to clean up).
. "$(dirname "$0")/_lib.sh"
stop_server "$1"
