"""A client round trip through a sidecar, run by an installed Python (the packaging tests).

argv: SIDECAR NAMESPACE. Prints the value after two batches, the committed batch it read
at, and where `taskstate.client` was imported from.
"""

import sys

import taskstate.client
from taskstate.client import LocalContext, TaskState

with TaskState(LocalContext(0, batch_id=0), component="c", namespace=sys.argv[2],
               sidecar=sys.argv[1]) as s:  # fmt: skip
    s["k"] = {"n": 1}
with TaskState(LocalContext(0, batch_id=1), component="c", namespace=sys.argv[2],
               sidecar=sys.argv[1]) as s:  # fmt: skip
    s["k"]["n"] += 1
    print(s["k"]["n"], s.info.committed_batch, taskstate.client.__file__)
