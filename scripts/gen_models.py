#!/usr/bin/env python3
"""Generate the ONNX model files of Tessera's quickstart model repository, deterministically.

    usage: gen_models.py [MODEL_REPO]      (default: <repo>/model-repos/quickstart)

Writes only the model files; config.pbtxt and labels.txt are hand-written files kept in git:

  add_sub/1/model.onnx     INPUT0, INPUT1  FP32  [batch, 16]  ->  OUTPUT0 = INPUT0 + INPUT1,
                                                                   OUTPUT1 = INPUT0 - INPUT1
  fanout_target/1/model.onnx  the add_sub graph again, for the bls_fanout guest to call
  simple/1/model.onnx      the same with INT32 (the model tritonclient's examples call "simple")
  classifier/1/model.onnx  INPUT0 FP32 [batch, 4]  ->  OUTPUT0 FP32 [batch, 5] = INPUT0 @ W + b
  text_scorer/1/model.onnx INPUT_IDS, ATTENTION_MASK INT64 [batch, 16]  ->  TOKEN_COUNT FP32 [batch, 1]
                           = sum(mask), ID_SUM INT64 [batch, 1] = sum(ids * mask)  (fed by the tokenizer guest)
  image_classifier/1/model.onnx  input FP32 [1, 3, 224, 224] -> output FP32 [1, 1000]: softmax of
                           the per-channel means times W (the graph the wasi:nn example guest
                           nn_classify loads by name, shaped like the mobilenet wasmtime's wasi-nn
                           tests classify): a red image is class 284, green 963, blue 10
  simple_sequence/1/model.onnx  Triton's simple_sequence accumulator with implicit state: INPUT,
                           START, READY, STATE_IN INT32 [batch, 1] -> OUTPUT = STATE_OUT =
                           READY ? INPUT + (START ? 0 : STATE_IN) : STATE_IN

The classifier's weights make its output trivial to predict: W is the 4x4 identity padded with a zero
column and b = [0, 0, 0, 0, 0.5], so OUTPUT0 = [x0, x1, x2, x3, 0.5] exactly (0/1 weights, no rounding).
With labels.txt = cat, dog, bird, fish, horse:
  - the top class is argmax(x) ("cat" for x0, ..., "fish" for x3) when max(x) > 0.5, else "horse";
  - e.g. [4, 3, 2, 1] -> cat 4, dog 3, bird 2, fish 1, horse 0.5 (top-5 in that order);
         [0, 0, 0, 0] -> horse 0.5; [0, 0, 1, 0] -> bird 1.

Every model is checked with onnx.checker (full_check) and run once with onnxruntime, asserting its
input/output signature and its outputs, before it is written. A file whose bytes would not change is
left alone apart from its mtime, which is refreshed so that scripts/setup-python.sh sees it as newer
than this script. Quiet on success.

ir_version 8 + opset 17 (ONNX 1.12 level): loadable by onnxruntime 1.31.1 and by much older runtimes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8
OPSET = 17
PRODUCER = "tessera/scripts/gen_models.py"
BATCH = "batch"  # dim_param of the dynamic batch dimension

LABELS = ["cat", "dog", "bird", "fish", "horse"]
CLASSIFIER_W = np.hstack([np.eye(4, dtype=np.float32), np.zeros((4, 1), dtype=np.float32)])
CLASSIFIER_B = np.array([0, 0, 0, 0, 0.5], dtype=np.float32)


def _model(graph: onnx.GraphProto, doc: str) -> onnx.ModelProto:
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name=PRODUCER,
        producer_version="1",
        doc_string=doc,
    )
    m.ir_version = IR_VERSION
    m.model_version = 1
    return m


def add_sub(name: str, elem_type: int) -> onnx.ModelProto:
    def vi(n: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(n, elem_type, [BATCH, 16])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
        ],
        name,
        [vi("INPUT0"), vi("INPUT1")],
        [vi("OUTPUT0"), vi("OUTPUT1")],
    )
    return _model(graph, f"{name}: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1")


def classifier() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["INPUT0", "W"], ["logits_no_bias"], name="matmul"),
            helper.make_node("Add", ["logits_no_bias", "b"], ["OUTPUT0"], name="bias"),
        ],
        "classifier",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [BATCH, 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [BATCH, 5])],
        initializer=[
            numpy_helper.from_array(CLASSIFIER_W, "W"),
            numpy_helper.from_array(CLASSIFIER_B, "b"),
        ],
    )
    return _model(graph, "classifier: OUTPUT0 = [x0, x1, x2, x3, 0.5]; labels cat dog bird fish horse")


IMAGE_CLASSES = 1000
# The class each colour channel votes for (red, green, blue).
IMAGE_CHANNEL_CLASS = (284, 963, 10)


def image_classifier() -> onnx.ModelProto:
    """softmax(mean over H, W of the image (one value per channel) @ W + b): W sends each channel
    to one class with weight 10; b decreases slowly with the class id, so ties break towards the
    lower id and every output is distinct."""
    w = np.zeros((3, IMAGE_CLASSES), dtype=np.float32)
    for channel, cls in enumerate(IMAGE_CHANNEL_CLASS):
        w[channel, cls] = 10.0
    b = -np.arange(IMAGE_CLASSES, dtype=np.float32) * 1e-3
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["input"], ["means"], axes=[2, 3], keepdims=0, name="means"),
            helper.make_node("MatMul", ["means", "W"], ["scores"], name="matmul"),
            helper.make_node("Add", ["scores", "b"], ["logits"], name="bias"),
            helper.make_node("Softmax", ["logits"], ["output"], axis=1, name="softmax"),
        ],
        "image_classifier",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, IMAGE_CLASSES])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    return _model(graph, "image_classifier: red image -> class 284, green -> 963, blue -> 10")


def text_scorer() -> onnx.ModelProto:
    """The ONNX model the tokenizer guest feeds: per row, TOKEN_COUNT = sum(mask) as FP32 and
    ID_SUM = sum(ids * mask) as INT64 (easy to check against the tokenizer's output)."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["ATTENTION_MASK"], ["mask_f"], to=TensorProto.FLOAT, name="cast"),
            helper.make_node("ReduceSum", ["mask_f", "axes"], ["TOKEN_COUNT"], keepdims=1, name="count"),
            helper.make_node("Mul", ["INPUT_IDS", "ATTENTION_MASK"], ["masked"], name="mask"),
            helper.make_node("ReduceSum", ["masked", "axes"], ["ID_SUM"], keepdims=1, name="sum"),
        ],
        "text_scorer",
        [
            helper.make_tensor_value_info("INPUT_IDS", TensorProto.INT64, [BATCH, 16]),
            helper.make_tensor_value_info("ATTENTION_MASK", TensorProto.INT64, [BATCH, 16]),
        ],
        [
            helper.make_tensor_value_info("TOKEN_COUNT", TensorProto.FLOAT, [BATCH, 1]),
            helper.make_tensor_value_info("ID_SUM", TensorProto.INT64, [BATCH, 1]),
        ],
        initializer=[numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")],
    )
    return _model(graph, "text_scorer: TOKEN_COUNT = sum(mask), ID_SUM = sum(ids * mask)")


def simple_sequence() -> onnx.ModelProto:
    """Accumulates INPUT over a sequence. START and READY are the sequence batcher's control inputs
    (int32 0/1); STATE_IN/STATE_OUT is the implicit state the server carries between requests."""
    i32 = TensorProto.INT32

    def vi(n: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(n, i32, [BATCH, 1])

    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "START"], ["not_start"], name="not_start"),
            helper.make_node("Mul", ["not_start", "STATE_IN"], ["carried"], name="carry"),
            helper.make_node("Add", ["INPUT", "carried"], ["acc"], name="accumulate"),
            helper.make_node("Sub", ["acc", "STATE_IN"], ["delta"], name="delta"),
            helper.make_node("Mul", ["READY", "delta"], ["ready_delta"], name="gate"),
            helper.make_node("Add", ["STATE_IN", "ready_delta"], ["STATE_OUT"], name="next_state"),
            helper.make_node("Identity", ["STATE_OUT"], ["OUTPUT"], name="output"),
        ],
        "simple_sequence",
        [vi("INPUT"), vi("START"), vi("READY"), vi("STATE_IN")],
        [vi("OUTPUT"), vi("STATE_OUT")],
        initializer=[numpy_helper.from_array(np.array([[1]], dtype=np.int32), "one")],
    )
    return _model(graph, "simple_sequence: OUTPUT = STATE_OUT = READY ? INPUT + (START ? 0 : STATE_IN) : STATE_IN")


# ---- validation --------------------------------------------------------------------------------

def _session(data: bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(data, sess_options=so, providers=["CPUExecutionProvider"])


def _check_signature(sess, inputs: dict, outputs: dict) -> None:
    got_in = {i.name: (i.type, list(i.shape)) for i in sess.get_inputs()}
    got_out = {o.name: (o.type, list(o.shape)) for o in sess.get_outputs()}
    assert got_in == inputs, f"inputs {got_in} != {inputs}"
    assert got_out == outputs, f"outputs {got_out} != {outputs}"


def validate_add_sub(data: bytes, dtype: type, ort_type: str) -> None:
    sess = _session(data)
    sig = {n: (ort_type, [BATCH, 16]) for n in ("INPUT0", "INPUT1")}
    _check_signature(sess, sig, {n: (ort_type, [BATCH, 16]) for n in ("OUTPUT0", "OUTPUT1")})
    rng = np.random.default_rng(0)
    for batch in (1, 3, 8):
        if dtype is np.int32:
            a = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
            b = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
        else:
            a = rng.standard_normal((batch, 16)).astype(dtype)
            b = rng.standard_normal((batch, 16)).astype(dtype)
        out0, out1 = sess.run(["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b})
        assert out0.dtype == dtype and out1.dtype == dtype
        np.testing.assert_array_equal(out0, a + b)
        np.testing.assert_array_equal(out1, a - b)


def validate_classifier(data: bytes) -> None:
    sess = _session(data)
    _check_signature(
        sess,
        {"INPUT0": ("tensor(float)", [BATCH, 4])},
        {"OUTPUT0": ("tensor(float)", [BATCH, 5])},
    )
    x = np.array(
        [[4, 3, 2, 1], [0, 0, 0, 0], [0, 0, 1, 0], [0.1, 0.2, 0.3, 0.4], [-1, 7, 2, 0]],
        dtype=np.float32,
    )
    (y,) = sess.run(["OUTPUT0"], {"INPUT0": x})
    np.testing.assert_array_equal(y, np.hstack([x, np.full((len(x), 1), 0.5, np.float32)]))
    top = [LABELS[i] for i in y.argmax(axis=1)]
    assert top == ["cat", "horse", "bird", "horse", "dog"], top
    assert [LABELS[i] for i in np.argsort(-y[0])] == LABELS  # [4,3,2,1] -> cat dog bird fish horse


def validate_text_scorer(data: bytes) -> None:
    sess = _session(data)
    _check_signature(
        sess,
        {"INPUT_IDS": ("tensor(int64)", [BATCH, 16]), "ATTENTION_MASK": ("tensor(int64)", [BATCH, 16])},
        {"TOKEN_COUNT": ("tensor(float)", [BATCH, 1]), "ID_SUM": ("tensor(int64)", [BATCH, 1])},
    )
    ids = np.arange(32, dtype=np.int64).reshape(2, 16)
    mask = np.zeros((2, 16), dtype=np.int64)
    mask[0, :3] = 1
    mask[1, :16] = 1
    count, total = sess.run(["TOKEN_COUNT", "ID_SUM"], {"INPUT_IDS": ids, "ATTENTION_MASK": mask})
    np.testing.assert_array_equal(count, [[3.0], [16.0]])
    np.testing.assert_array_equal(total, [[0 + 1 + 2], [sum(range(16, 32))]])


def validate_image_classifier(data: bytes) -> None:
    sess = _session(data)
    _check_signature(
        sess,
        {"input": ("tensor(float)", [1, 3, 224, 224])},
        {"output": ("tensor(float)", [1, IMAGE_CLASSES])},
    )
    for channel, cls in enumerate(IMAGE_CHANNEL_CLASS):
        image = np.zeros((1, 3, 224, 224), dtype=np.float32)
        image[0, channel] = 1.0
        (y,) = sess.run(["output"], {"input": image})
        assert y.argmax() == cls, (channel, y.argmax())
        assert abs(float(y.sum()) - 1.0) < 1e-4
        assert list(np.argsort(-y[0])[:5]) == [cls, 0, 1, 2, 3]


# ---- output ------------------------------------------------------------------------------------

def validate_simple_sequence(data: bytes) -> None:
    sess = _session(data)
    col = lambda *v: np.array(v, dtype=np.int32).reshape(-1, 1)  # noqa: E731
    out, state = sess.run(None, {"INPUT": col(5, 7, 2), "START": col(1, 0, 0), "READY": col(1, 1, 0), "STATE_IN": col(100, 10, 4)})
    assert out.tolist() == [[5], [17], [4]] and state.tolist() == out.tolist(), (out, state)


def _write_if_changed(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.read_bytes() == data:
        os.utime(path)
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str]) -> int:
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        print(__doc__, file=sys.stderr)
        return 2
    default = Path(__file__).resolve().parent.parent / "model-repos" / "quickstart"
    repo = Path(argv[1]) if len(argv) == 2 else default

    models = [
        ("add_sub", add_sub("add_sub", TensorProto.FLOAT),
         lambda d: validate_add_sub(d, np.float32, "tensor(float)")),
        # The same graph again: the model the bls_fanout guest calls (its own dynamic batcher).
        ("fanout_target", add_sub("fanout_target", TensorProto.FLOAT),
         lambda d: validate_add_sub(d, np.float32, "tensor(float)")),
        ("simple", add_sub("simple", TensorProto.INT32),
         lambda d: validate_add_sub(d, np.int32, "tensor(int32)")),
        ("classifier", classifier(), validate_classifier),
        ("text_scorer", text_scorer(), validate_text_scorer),
        ("simple_sequence", simple_sequence(), validate_simple_sequence),
        ("image_classifier", image_classifier(), validate_image_classifier),
    ]
    for name, model, validate in models:
        onnx.checker.check_model(model, full_check=True)
        data = model.SerializeToString(deterministic=True)
        validate(data)
        _write_if_changed(repo / name / "1" / "model.onnx", data)
        if not (repo / name / "config.pbtxt").is_file():
            print(f"gen_models: warning: {repo / name / 'config.pbtxt'} is missing", file=sys.stderr)

    labels = repo / "classifier" / "labels.txt"
    if labels.is_file():
        got = labels.read_text().split()
        assert got == LABELS, f"{labels} has {got}, the classifier's weights assume {LABELS}"
    else:
        print(f"gen_models: warning: {labels} is missing", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
