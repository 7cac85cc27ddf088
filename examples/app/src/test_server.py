"""The sample app's own unit test, run by bin/run_tests.sh."""

import ast
from pathlib import Path

source = (Path(__file__).parent / "server.py").read_text()
ast.parse(source)
assert "def do_GET" in source
print("1 passed")
