"""The `taskstate` command line."""
