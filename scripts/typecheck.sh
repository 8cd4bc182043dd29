#!/usr/bin/env bash
# mypy --strict over our code, the tests and the benchmarks. The folders are subpackages
# of `taskstate` (see pyproject.toml), so a symlink tree in .typecheck/ gives mypy the
# import names; tests/ and benchmarks/ are packages of their own beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -rf .typecheck && mkdir -p .typecheck/taskstate
for d in client sidecar spark_plugin demo proto cli testing; do ln -s "../../$d" ".typecheck/taskstate/$d"; done
for d in tests benchmarks scripts; do ln -s "../$d" ".typecheck/$d"; done
cd .typecheck
MYPYPATH=. "../$PY" -m mypy --config-file ../pyproject.toml \
  -p taskstate.client -p taskstate.sidecar -p taskstate.spark_plugin -p taskstate.demo \
  -p taskstate.cli -p taskstate.testing -p tests -p benchmarks
