"""The gRPC layer of the sidecar, one module per audience.

service (registration: every RPC of the .proto behind the guard), guard (counting, the
in-flight limit, tokens, error mapping: what every call goes through), wire (what a
request's fields mean, checked), task (the calls of Spark tasks: Open, Restore, Commit,
MultiGet, Describe), admin (the operators': List, Drop, Adopt, Rescale, Edit, Read,
Import, Doctor), flush (the Python workers' Attach stream).
"""
