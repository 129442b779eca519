"""Model-repository builders for the integration tests: the quickstart repository, copies of its
models, config.pbtxt text, atomic writes a polling server never sees half-done, the sandbox-test
guest `faulty`, and one-node ONNX models. No server here: tessera_testlib re-exports these.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Iterable

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = REPO_ROOT / "model-repos" / "quickstart"
FAULTY_GUEST = REPO_ROOT / "target" / "guests" / "faulty" / "model.wasm"
FAULTY_CONFIG = REPO_ROOT / "example-guests" / "faulty" / "config.pbtxt"


def quickstart_models() -> set[str]:
    """Every model directory of the quickstart repository (ONNX and WebAssembly)."""
    return {p.name for p in QUICKSTART.iterdir() if p.is_dir() and (p / "config.pbtxt").is_file()}


def is_ensemble(model_dir: Path) -> bool:
    """An ensemble's directory has no model file (its config says platform "ensemble")."""
    return re.search(r'platform:\s*"ensemble"', (model_dir / "config.pbtxt").read_text()) is not None


def quickstart_repo() -> Path:
    """The quickstart repository; fails clearly if its generated ONNX files are missing."""
    missing = [
        str(next(iter((QUICKSTART / m / "1").glob("model.*")), QUICKSTART / m / "1" / "model.*"))
        for m in sorted(quickstart_models())
        if not any((QUICKSTART / m / "1").glob("model.*")) and not is_ensemble(QUICKSTART / m)
    ]
    if missing:
        pytest.fail(
            "quickstart model files are missing (run scripts/setup.sh, which generates the ONNX "
            f"models and builds the WebAssembly guests): {', '.join(missing)}",
            pytrace=False,
        )
    return QUICKSTART


# ---------------------------------------------------------------------------------------------
# Model repositories
# ---------------------------------------------------------------------------------------------

def add_sub_config(name: str, *, dtype: str = "TYPE_FP32", max_batch_size: int = 8,
                   input_dims: str = "[ 16 ]", input_extra: str = "", output_dims: str = "[ 16 ]",
                   backend_line: str = 'backend: "onnxruntime"', extra: str = "") -> str:
    """A complete config.pbtxt for an add_sub-like model (INPUT0/INPUT1 -> OUTPUT0 sum, OUTPUT1 diff)."""
    def tensor(n: str, dims: str, more: str = "") -> str:
        return f'  {{\n    name: "{n}"\n    data_type: {dtype}\n    dims: {dims}\n{more}  }}'

    more_in = f"    {input_extra}\n" if input_extra else ""
    return (
        f'name: "{name}"\n'
        f"{backend_line}\n"
        f"max_batch_size: {max_batch_size}\n"
        "input [\n"
        f"{tensor('INPUT0', input_dims, more_in)},\n{tensor('INPUT1', input_dims, more_in)}\n"
        "]\n"
        "output [\n"
        f"{tensor('OUTPUT0', output_dims)},\n{tensor('OUTPUT1', output_dims)}\n"
        "]\n"
        f"{extra}\n"
    )


def write_config_model(repo: Path, name: str, config: str) -> Path:
    """Model `name` in `repo`: its config.pbtxt and a version directory 1 with no model file (the
    utility backends, identity, repeat and square, and ensembles need none). Its directory."""
    d = repo / name
    (d / "1").mkdir(parents=True)
    (d / "config.pbtxt").write_text(config)
    return d


def slow_identity_config(name: str, delay_ms: int, *, max_batch_size: int = 0, extra: str = "") -> str:
    """An identity model (INT32 INPUT0 -> OUTPUT0, dims [ 1 ]) whose every execution takes
    `delay_ms`; `extra`: more config lines (instance_group, dynamic_batching, model_metrics)."""
    return (f'name: "{name}"\nbackend: "identity"\nmax_batch_size: {max_batch_size}\n'
            'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
            f'parameters [ {{ key: "execute_delay_ms" value: {{ string_value: "{delay_ms}" }} }} ]\n'
            f"{extra}")


# The repeat backend (decoupled): IN's elements one response each, DELAY ms apart, after WAIT ms.
REPEAT_CONFIG = """name: "{name}"
backend: "repeat"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }},
        {{ name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }},
        {{ name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
         {{ name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }} ]
"""


def ensemble_config(name: str, step: str) -> str:
    """An ensemble of one step from FP32 X to FP32 Y (dims [ -1 ], batches up to 8); `step` is the
    step's body (model_name, model_version, input_map, output_map)."""
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
            'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            f"ensemble_scheduling {{ step [ {{ {step} }} ] }}\n")


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write via a temp file + rename, so a polling server never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    if isinstance(text, str):
        tmp.write_text(text)
    else:
        tmp.write_bytes(text)
    os.replace(tmp, path)


def copy_model(dst_repo: Path, src_name: str, dst_name: str | None = None, *,
               versions: Iterable[int] = (1,), config: str | None = None,
               with_config: bool = True) -> Path:
    """Copy a quickstart model into dst_repo (optionally renamed, with several version dirs and/or a
    replacement config.pbtxt). Built in a staging dir beside the repo then renamed in, atomically."""
    src = quickstart_repo() / src_name
    dst_name = dst_name or src_name
    dst_repo.mkdir(parents=True, exist_ok=True)
    staging_root = dst_repo.parent / f".staging-{dst_repo.name}"
    staging_root.mkdir(exist_ok=True)
    stage = staging_root / dst_name
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    for v in versions:
        shutil.copytree(src / "1", stage / str(v))
    for extra_file in src.iterdir():
        if extra_file.is_file() and extra_file.name != "config.pbtxt":
            shutil.copy2(extra_file, stage / extra_file.name)
    if with_config:
        if config is None:
            text = (src / "config.pbtxt").read_text()
            if dst_name != src_name:
                text = re.sub(r'(?m)^name:\s*"[^"]*"', f'name: "{dst_name}"', text)
            config = text
        (stage / "config.pbtxt").write_text(config)
    dst = dst_repo / dst_name
    os.rename(stage, dst)
    return dst


def add_version_dir(model_dir: Path, version: int, src_name: str = "simple") -> Path:
    """Atomically add model_dir/<version> holding a copy of a quickstart model file."""
    staging = model_dir.parent.parent / f".staging-v{version}-{model_dir.name}"
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(quickstart_repo() / src_name / "1", staging)
    dst = model_dir / str(version)
    os.rename(staging, dst)
    return dst


def remove_tree_atomic(path: Path) -> None:
    """Move a directory out of the repository in one rename, then delete it."""
    graveyard = path.parent.parent / f".removed-{path.name}-{time.monotonic_ns()}"
    os.rename(path, graveyard)
    shutil.rmtree(graveyard)


def copy_faulty(dst_repo: Path, name: str = "faulty", extra_config: str = "") -> Path:
    """The sandbox-test guest `faulty` (target/guests/faulty, built by scripts/build-guests.sh) as
    model `name`, with extra config lines appended (e.g. more `parameters`)."""
    if not FAULTY_GUEST.is_file():
        pytest.fail(f"{FAULTY_GUEST} is missing: run scripts/build-guests.sh (scripts/setup.sh runs it)",
                    pytrace=False)
    config = FAULTY_CONFIG.read_text()
    if name != "faulty":
        config = re.sub(r'(?m)^name:\s*"[^"]*"', f'name: "{name}"', config)
    d = dst_repo / name
    (d / "1").mkdir(parents=True)
    shutil.copy2(FAULTY_GUEST, d / "1" / "model.wasm")
    (d / "config.pbtxt").write_text(config + extra_config)
    return d


# ---------------------------------------------------------------------------------------------
# One-node ONNX models of one datatype
# ---------------------------------------------------------------------------------------------

def write_onnx_model(repo, name: str, dtype: str, dims: list[int], *, max_batch_size: int = 0,
                     inp: str = "TEXT", out: str = "ECHO", op: str = "Identity") -> Path:
    """An ONNX model of one node `out = op(inp)` (`op(inp, inp)` for a binary op such as "Add")
    of one datatype (TYPE_STRING, TYPE_FP32 or TYPE_INT32), with its config; its directory."""
    import onnx
    from onnx import TensorProto, helper

    onnx_type = {"TYPE_STRING": TensorProto.STRING, "TYPE_FP32": TensorProto.FLOAT,
                 "TYPE_INT32": TensorProto.INT32}[dtype]
    onnx_dims = ([None] if max_batch_size else []) + [None if d < 0 else d for d in dims]
    operands = [inp] if op == "Identity" else [inp, inp]
    graph = helper.make_graph(
        [helper.make_node(op, operands, [out])], name,
        [helper.make_tensor_value_info(inp, onnx_type, onnx_dims)],
        [helper.make_tensor_value_info(out, onnx_type, onnx_dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    d = repo / name
    (d / "1").mkdir(parents=True)
    onnx.save(model, str(d / "1" / "model.onnx"))
    dims_text = ", ".join(str(x) for x in dims)
    (d / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {{ name: "{inp}" data_type: {dtype} dims: [ {dims_text} ] }} ]\n'
        f'output [ {{ name: "{out}" data_type: {dtype} dims: [ {dims_text} ] }} ]\n')
    return d


def write_string_identity(repo, name: str = "strings") -> None:
    """An ONNX Identity over a STRING tensor [-1] (no batching)."""
    write_onnx_model(repo, name, "TYPE_STRING", [-1])
