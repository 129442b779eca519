# An OpenAI adapter written as a Triton Python model (docs/openai.md, "Adapters"): /v1/embeddings
# for a BERT-style encoder, what example-guests/openai_adapter does in Rust, in plain Python with
# numpy. It reads the model's tokenizer.json from its own version directory (parameter
# `filesystem` = `read-only`) and tokenizes as Hugging Face's BertNormalizer, BertPreTokenizer and
# WordPiece do; it calls the encoder named in the request through BLS, then mean-pools over the
# attention mask and normalises, as sentence-transformers does.
#
# Protocol: input `request` (BYTES [1]) holds the door's JSON call; one response with `embedding`
# (FP32 [N, D]) and `num_input_tokens` (INT32 [1]). The model is decoupled.
import json
import os
import unicodedata

import numpy as np
import triton_python_backend_utils as pb_utils


def is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class WordPiece:
    """The BERT tokenizer of a tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece)."""

    def __init__(self, spec):
        model, norm = spec["model"], spec.get("normalizer") or {}
        self.vocab = model["vocab"]
        self.unk = self.vocab[model["unk_token"]]
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.max_chars = model.get("max_input_chars_per_word", 100)
        self.lowercase = norm.get("lowercase", True)
        strip = norm.get("strip_accents")
        self.strip_accents = self.lowercase if strip is None else strip
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]

    def normalize(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
                continue
            if ch in "\t\n\r" or unicodedata.category(ch) == "Zs":
                out.append(" ")
            elif is_cjk(cp):
                out.append(" " + ch + " ")
            else:
                out.append(ch)
        text = "".join(out)
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            text = text.lower()
        return text

    def words(self, text):
        for chunk in text.split():
            word = ""
            for ch in chunk:
                if is_punctuation(ch):
                    if word:
                        yield word
                    word = ""
                    yield ch
                else:
                    word += ch
            if word:
                yield word

    def piece(self, word):
        if len(word) > self.max_chars:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                sub = word[start:end] if start == 0 else self.prefix + word[start:end]
                if sub in self.vocab:
                    found = self.vocab[sub]
                    break
                end -= 1
            if found is None:
                return [self.unk]
            ids.append(found)
            start = end
        return ids

    def encode(self, text):
        ids = [self.cls]
        for word in self.words(self.normalize(text)):
            ids.extend(self.piece(word))
        return ids + [self.sep]


def encode(model, rows):
    """One BLS call of the encoder for `rows`, padded to the longest; each row's pooled, normalised
    vector."""
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for r, row in enumerate(rows):
        ids[r, :len(row)] = row
        mask[r, :len(row)] = 1
    inputs = [pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask),
              pb_utils.Tensor("token_type_ids", np.zeros_like(ids))]
    answer = pb_utils.InferenceRequest(model_name=model, requested_output_names=["last_hidden_state"],
                                       inputs=inputs).exec()
    if answer.has_error():
        raise RuntimeError(answer.error().message())
    hidden = pb_utils.get_output_tensor_by_name(answer, "last_hidden_state").as_numpy()
    weights = mask[:, :, None].astype(np.float32)
    mean = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "tokenizer.json")
        with open(path, encoding="utf-8") as f:
            self.tokenizer = WordPiece(json.load(f))

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                response = self.embed(request)
            except ValueError as e:
                response = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(e), pb_utils.TritonError.INVALID_ARG))
            sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def embed(self, request):
        call = json.loads(pb_utils.get_input_tensor_by_name(request, "request").as_numpy().reshape(-1)[0])
        if call.get("kind") != "embedding":
            raise ValueError("model '%s' is an embedding model: it has no completions" % call.get("model"))
        context = call.get("context_length")
        rows = []
        for i, item in enumerate(call["input"]):
            ids = self.tokenizer.encode(item) if isinstance(item, str) else list(item)
            if context and len(ids) > context:
                raise ValueError("This model's maximum context length is %d tokens, however you requested %d "
                                 "tokens in input %d. Please reduce your input." % (context, len(ids), i))
            rows.append(ids)
        # As sentence-transformers batches: by length, a BLS call per 32 inputs.
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        pooled = [None] * len(rows)
        for start in range(0, len(order), 32):
            chunk = order[start:start + 32]
            for i, vector in zip(chunk, encode(call["model"], [rows[i] for i in chunk])):
                pooled[i] = vector
        mean = np.stack(pooled)
        tokens = np.array([sum(len(r) for r in rows)], dtype=np.int32)
        return pb_utils.InferenceResponse([pb_utils.Tensor("embedding", mean.astype(np.float32)),
                                           pb_utils.Tensor("num_input_tokens", tokens)])
