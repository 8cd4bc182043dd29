"""Spark glue: the example job now; ids, API wrappers and the executor plugin (issue 3).

`taskstate.spark_plugin.example` is the core end-to-end example (`taskstate example`).
"""
