"""The demo, the example job and the fault harness: taskstate shown under faults.

Not part of the library a job imports (`taskstate.client`, `taskstate.spark_plugin`):

- `trending`: `taskstate demo`, trending hashtags golden, under faults with taskstate,
  and with a plain dict (needs `taskstate[spark,demo]`);
- `example`: `taskstate example --api API`, running totals through each Spark API;
- `jobs`: that running-totals job, its replayable source and its expected results;
- `faults`: the faults the jobs strike in themselves (a worker, the sidecar, Redis, the
  executor, the whole query), once per run.
"""
