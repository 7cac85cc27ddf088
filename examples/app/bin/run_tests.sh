#!/usr/bin/env bash
# run_tests.sh VERSION — run the app's unit tests.
. "$(dirname "$0")/_lib.sh"
echo "running tests for $1"
python3 "$(dirname "$0")/../src/test_server.py"
