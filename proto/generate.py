"""Generate the Python protocol modules from src/halyard/v1/*.proto.

    .venv/bin/python proto/generate.py           # write src/halyard/v1/*_pb2*.py(i)
    .venv/bin/python proto/generate.py --check   # exit 1 if the checked-in files are stale (CI)

The sources live beside their modules in src/halyard/v1 (one copy: the wheel ships them
as package data of ``halyard.v1``, under the include root of their import paths,
``halyard.v1.PROTO_INCLUDE``), so the modules import as ``halyard.v1.*``, which is also
the protobuf package name. grpcio-tools is pinned in the
``test`` extra of pyproject.toml so every machine generates the same bytes.

One change to protoc's output: in the type stubs (``*_pb2.pyi``) a constructor's enum field also
takes an ``int`` (:func:`open_enum_stubs`).
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "src"
PROTO_DIR = OUT_DIR  # include root of the sources: src/halyard/v1/*.proto
PACKAGE = Path("halyard") / "v1"
INIT = '''"""Generated protocol modules (package halyard.v1); regenerate with proto/generate.py.

The .proto sources ship beside these modules. ``PROTO_INCLUDE`` is their include root, the
directory that holds the ``halyard`` package: ``protoc -I PROTO_INCLUDE halyard/v1/job_service.proto``,
``grpcurl -import-path PROTO_INCLUDE -proto halyard/v1/job_service.proto`` (docs/api.md).
"""

from pathlib import Path

PROTO_INCLUDE = str(Path(__file__).resolve().parents[2])
PROTO_FILES = {files}
'''


ENUM_CLASS = re.compile(r"^class (\w+)\(int, metaclass=_enum_type_wrapper\.EnumTypeWrapper\):$", re.M)


def open_enum_stubs(stubs: list[Path]) -> None:
    """Let a constructor's enum field take an ``int`` in the stubs, as protobuf does at run time.

    protoc's stubs type an enum field's argument as the enum class or its value's name, but the
    runtime has no such class: ``JobState.Value("RUNNING")``, a field read from another message
    and a number a newer peer sent (proto3 enums are open) are all plain ``int``, which the
    constructor takes. Without this, type-checked code could only pass the module's constants."""
    enums = {name for stub in stubs for name in ENUM_CLASS.findall(stub.read_text(encoding="utf-8"))}
    if not enums:
        return
    names = "|".join(sorted(enums))
    enum_or_name = re.compile(rf"_Union\[((?:\w+\.)?(?:{names})), str\]")
    for stub in stubs:
        text = stub.read_text(encoding="utf-8")
        stub.write_text(enum_or_name.sub(r"_Union[\1, int, str]", text), encoding="utf-8")


def generate(out: Path) -> list[Path]:
    sources = sorted((PROTO_DIR / PACKAGE).glob("*.proto"))
    include = str(resources.files("grpc_tools") / "_proto")
    args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", *(str(s.relative_to(PROTO_DIR)) for s in sources)]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    open_enum_stubs(sorted((out / PACKAGE).glob("*_pb2.pyi")))
    for source in sources:  # --check's scratch tree gets the sources too, so the listings compare
        if source.parent != out / PACKAGE:
            shutil.copyfile(source, out / PACKAGE / source.name)
    names = tuple(str(s.relative_to(PROTO_DIR)) for s in sources)
    (out / PACKAGE / "__init__.py").write_text(INIT.format(files=names), encoding="utf-8")
    return sorted((out / PACKAGE).iterdir())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    if not args.check:
        for path in generate(OUT_DIR):
            print(path.relative_to(ROOT))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p for p in generate(Path(tmp)) if p.is_file()}
        current = {p.name: p for p in (OUT_DIR / PACKAGE).glob("*") if p.is_file() and p.name != "__pycache__"}
        stale = sorted(set(fresh) ^ set(current))
        stale += [n for n in sorted(set(fresh) & set(current)) if not filecmp.cmp(fresh[n], current[n], shallow=False)]
        if stale:
            print(f"generated protocol modules are stale: {', '.join(stale)}; run proto/generate.py", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
