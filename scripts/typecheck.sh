#!/usr/bin/env bash
# mypy --strict over our code, the tests and the benchmarks. The folders are subpackages
# of `taskstate` (see pyproject.toml), so the symlink tree scripts/import_tree.py makes in
# .import-tree/ gives mypy the import names.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
cd "$("$PY" scripts/import_tree.py)"
MYPYPATH=. "../$PY" -m mypy --config-file ../pyproject.toml \
  -p taskstate.client -p taskstate.sidecar -p taskstate.spark_plugin -p taskstate.demo \
  -p taskstate.cli -p taskstate.testing -p tests -p benchmarks
