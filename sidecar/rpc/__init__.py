"""The gRPC layer of the sidecar, one module per audience.

service (registration: every RPC of the .proto behind the guard), guard (counting, the
in-flight limit, tokens, error mapping: what every call goes through), wire (what a
request's fields mean, checked), task (the calls of Spark tasks: Open, Commit, OpenCommit,
Describe), read (Read: every read of a task's state, an attempt's and claim-free ones),
admin (the operators': List, Drop, Adopt, Rescale, Edit, Import, Doctor), seed (the data
source's writes), flush (the Python workers' Attach stream).
"""
