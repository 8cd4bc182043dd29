"""The wire contract shared by taskstate.client and taskstate.sidecar.

Holds the .proto, the stubs generated from it (by scripts/gen_protos.py only), the
task-id grammar (`ids`), the version token (`versions`), the durability levels
(`durability`) and the stable error codes (`codes`). Neither side imports the other;
both import this.
"""
