"""Generate the gRPC stubs in proto/ from proto/taskstate.proto.

The only producer of proto/taskstate_pb2*.py and .pyi. `--check` regenerates into a
temporary folder and exits 1 when the committed stubs differ (stale stubs fail CI).

Usage: python scripts/gen_protos.py [--check]
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUTPUTS = ("taskstate_pb2.py", "taskstate_pb2.pyi", "taskstate_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    """Run protoc so that the stubs import each other as `taskstate.proto.*`."""
    from grpc_tools import protoc  # imported late: only needed by developers

    with tempfile.TemporaryDirectory() as tmp:
        src_root = Path(tmp) / "src"
        pkg = src_root / "taskstate" / "proto"
        pkg.mkdir(parents=True)
        shutil.copy(PROTO_DIR / "taskstate.proto", pkg / "taskstate.proto")
        gen_root = Path(tmp) / "gen"
        gen_root.mkdir()
        include = Path(protoc.__file__).parent / "_proto"
        rc = protoc.main(
            [
                "protoc",
                f"-I{src_root}",
                f"-I{include}",
                f"--python_out={gen_root}",
                f"--pyi_out={gen_root}",
                f"--grpc_python_out={gen_root}",
                "taskstate/proto/taskstate.proto",
            ]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed with exit code {rc}")
        for name in OUTPUTS:
            shutil.copy(gen_root / "taskstate" / "proto" / name, out_dir / name)


def main() -> int:
    """Generate, or with --check compare against, the committed stubs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when stubs are stale")
    args = parser.parse_args()
    if not args.check:
        generate(PROTO_DIR)
        print(f"generated {', '.join(OUTPUTS)} in {PROTO_DIR}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = [
            n
            for n in OUTPUTS
            if not (PROTO_DIR / n).exists()
            or not filecmp.cmp(Path(tmp) / n, PROTO_DIR / n, shallow=False)
        ]
    if stale:
        print(
            f"stale gRPC stubs: {', '.join(stale)}; run `python scripts/gen_protos.py` "
            "and commit the result",
            file=sys.stderr,
        )
        return 1
    print("gRPC stubs are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
