# A guest built with numpy, for tests/test_numpy_guest.py: the request parameter "op" picks what
# execute() does with that request.
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.sent_late = 0

    def execute(self, requests):
        ops = [json.loads(r.parameters()).get("op", "roundtrip") for r in requests]
        if "threaded" in ops:
            for r in requests:
                self.threaded(r)
            return None
        return [getattr(self, op)(r) for op, r in zip(ops, requests)]

    def roundtrip(self, request):
        # every input through as_numpy() and back through Tensor(name, array)
        out = []
        for t in request.inputs():
            a = t.as_numpy()
            if t.datatype() != "BF16":
                assert a.dtype == pb_utils.triton_to_numpy_type(t.triton_dtype()) or t.datatype() == "BYTES"
            out.append(pb_utils.Tensor("OUT_" + t.name(), a) if t.datatype() != "BF16"
                       else pb_utils.Tensor("OUT_" + t.name(), a, "BF16"))
        return pb_utils.InferenceResponse(out)

    def view(self, request):
        # as_numpy() is a read-only view: writing to it raises
        a = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
        try:
            a[0] = 1
            writable = True
        except ValueError:
            writable = False
        return pb_utils.InferenceResponse([pb_utils.Tensor("WRITABLE", np.array([writable]))])

    def math(self, request):
        # numpy's lazily imported parts, and real work
        x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy().astype(np.float64)
        m = x.reshape(2, 2)
        inv = np.linalg.inv(m)
        spectrum = np.abs(np.fft.fft(x))
        rng = np.random.default_rng(7)
        masked = np.ma.masked_less(x, 5).sum()
        words = np.char.upper(np.array(["a", "b"]))
        uniq = np.unique(np.array([3, 1, 3, 2]))
        out_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(self.config, "INV")["data_type"])
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("INV", inv.astype(out_dtype)),
            pb_utils.Tensor("FFT", spectrum),
            pb_utils.Tensor("RANDOM", rng.integers(0, 10, size=3)),
            pb_utils.Tensor("MASKED_SUM", np.array([masked])),
            pb_utils.Tensor("WORDS", words.astype(np.object_)),
            pb_utils.Tensor("UNIQUE", uniq),
        ])

    def strings(self, request):
        # BYTES come as an np.object_ array of bytes; str elements go out UTF-8 encoded
        t = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
        assert t.dtype == np.object_ and isinstance(t.flat[0], bytes)
        out = np.array([s.decode().upper() + "!" for s in t.flat], dtype=np.object_).reshape(t.shape)
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)])

    def cxx_exception(self, request):
        # pocketfft throws a C++ exception for a zero-length FFT (numpy's Python checks it first:
        # its ufunc, called directly, does not), which a Wasm guest cannot catch
        from numpy.fft import _pocketfft_umath

        _pocketfft_umath.rfft_n_even(np.ones(4), 1.0, out=np.empty(1, np.complex128))
        return pb_utils.InferenceResponse([])

    def bls(self, request):
        # a BLS request built from arrays, its response read as arrays
        x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
        k = np.array([2.0], dtype=np.float32)
        inner = pb_utils.InferenceRequest(
            model_name=b"inner", requested_output_names=["Y"],
            inputs=[pb_utils.Tensor("X", x), pb_utils.Tensor("K", k)]).exec()
        if inner.has_error():
            raise pb_utils.TritonModelException(inner.error().message())
        y = pb_utils.get_output_tensor_by_name(inner, "Y").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor("Y", y + 1)])

    def threaded(self, request):
        # Triton's decoupled pattern: a thread sends the responses after execute returns
        sender = request.get_response_sender()
        n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])

        def send():
            for i in range(n):
                time.sleep(0.001)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("I", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            self.sent_late += 1

        thread = threading.Thread(target=send)
        thread.daemon = True
        thread.start()
        assert thread.is_alive(), "a started thread runs once execute() returns"
