#!/usr/bin/env python3
"""Writes TorchScript model files (model.pt) without importing torch.

A TorchScript archive is a zip of TorchScript source (code/__torch__.py), a pickle naming the
module's class (data.pkl), its constants (constants.pkl) and a format version. libtorch compiles
the source when it loads the file, exactly as it does for files saved by torch.jit.save. Writing
the archive here keeps setup free of the 3 GB of CUDA wheels that `import torch` needs (the server
only needs libtorch's CPU libraries), and the forward() argument names are ours to choose, which
is what Triton's naming conventions key on.

    python3 scripts/gen_torch_models.py <quickstart dir>

writes the quickstart's TorchScript models; tests import `write_model` / `MODELS` for theirs.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

# libtorch 2.x writes format version 3 for archives whose code is source (no bytecode).
ARCHIVE_VERSION = "3"


def _module(class_name: str, args: list[str], returns: str, body: list[str]) -> str:
    params = ",\n".join(f"    {a}: Tensor" for a in args)
    lines = [
        f"class {class_name}(Module):",
        "  __parameters__ = []",
        "  __buffers__ = []",
        f"  def forward(self: __torch__.{class_name},",
        f"{params}) -> {returns}:",
    ]
    lines += [f"    {line}" for line in body]
    return "\n".join(lines) + "\n"


def write_archive(path: Path, class_name: str, source: str) -> None:
    """Writes one TorchScript archive whose root module is `class_name` defined in `source`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # pickle protocol 2: GLOBAL __torch__.<class>, NEWOBJ with no arguments, empty state.
    data_pkl = b"\x80\x02c__torch__\n" + class_name.encode() + b"\nq\x00)\x81}(ubq\x01."
    constants_pkl = b"\x80\x02)."  # an empty tuple
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in (
            ("model/data.pkl", data_pkl),
            ("model/code/__torch__.py", source.encode()),
            ("model/constants.pkl", constants_pkl),
            ("model/version", ARCHIVE_VERSION.encode()),
            ("model/byteorder", b"little"),
        ):
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))  # reproducible bytes
            z.writestr(info, data)
    tmp.replace(path)


# Each model: (class name, forward() argument names, return type, body).
_ALL_TYPES = ["b", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"]

MODELS: dict[str, tuple[str, list[str], str, list[str]]] = {
    # (x, y) -> (x + y, x - y): naming and batching tests.
    "add_sub": (
        "AddSub",
        ["x", "y"],
        "Tuple[Tensor, Tensor]",
        ["return (torch.add(x, y), torch.sub(x, y))"],
    ),
    # text_scorer's TorchScript twin: TOKEN_COUNT = sum(mask) (FP32), ID_SUM = sum(ids * mask) (INT64).
    "text_scorer": (
        "TextScorer",
        ["input_ids", "attention_mask"],
        "Tuple[Tensor, Tensor]",
        [
            "count = torch.sum(attention_mask, [1], True, dtype=6)",
            "id_sum = torch.sum(torch.mul(input_ids, attention_mask), [1], True)",
            "return (count, id_sum)",
        ],
    ),
    # A small network with weights: FEATURES [batch, 4] -> PROBABILITIES [batch, 3] (linear + softmax).
    "linear_classifier": (
        "LinearClassifier",
        ["features"],
        "Tensor",
        [
            "weight = torch.tensor([[0.5, -0.25, 0.1, 0.0], [-0.3, 0.8, 0.2, 0.1], [0.05, 0.05, -0.6, 0.9]], dtype=6)",
            "bias = torch.tensor([0.1, -0.1, 0.0], dtype=6)",
            "logits = torch.add(torch.matmul(features, torch.t(weight)), bias)",
            "return torch.softmax(logits, -1)",
        ],
    ),
    # OUTPUT0 = 2 * INPUT0: the GPU suite's BLS target (tests/gpu).
    "double": ("Double", ["x"], "Tensor", ["return torch.mul(x, 2)"]),
    # One input and output per TorchScript datatype: output = input + 1 (booleans: not).
    "all_types": (
        "AllTypes",
        _ALL_TYPES,
        "Tuple[" + ", ".join(["Tensor"] * len(_ALL_TYPES)) + "]",
        ["return (torch.logical_not(b), " + ", ".join(f"torch.add({a}, 1)" for a in _ALL_TYPES[1:]) + ")"],
    ),
}

# The TorchScript files of model-repos/quickstart.
QUICKSTART = {"text_scorer_torch/1/model.pt": "text_scorer", "linear_classifier/1/model.pt": "linear_classifier"}


def write_model(path: Path, model: str) -> Path:
    class_name, args, returns, body = MODELS[model]
    write_archive(Path(path), class_name, _module(class_name, args, returns, body))
    return Path(path)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[1])
    for rel, model in QUICKSTART.items():
        write_model(root / rel, model)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
