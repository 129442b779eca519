# A guest that tries to pass every bound on a model's own telemetry (tests/test_telemetry_bounds.py).
# At initialize it asks for what each bound refuses and logs "bounds refused <what>: <message>" for
# each refusal ("bounds: accepted <what>" when one is not refused); then it holds families until
# one is refused, then series with 1 KiB label values until one is refused. Per request it opens
# 300 spans, each with 20 attributes and an event of 50 attributes of 1 KiB values (~21 MB
# of span data unbounded). OUTPUT0 is INPUT0.
import triton_python_backend_utils as pb_utils

GAUGE = pb_utils.MetricFamily.GAUGE
KIB = "v" * 1024


def attempt(what, create):
    try:
        create()
        pb_utils.Logger.log_error(f"bounds: accepted {what}")
    except pb_utils.TritonModelException as e:
        pb_utils.Logger.log_info(f"bounds refused {what}: " + e.message())


class TritonPythonModel:
    def initialize(self, args):
        self.held = []
        gauge = pb_utils.MetricFamily("bounds_gauge", "A gauge", GAUGE)
        histogram = pb_utils.MetricFamily("bounds_histogram", "A histogram", pb_utils.MetricFamily.HISTOGRAM)
        self.held += [gauge, histogram]
        mebibyte = "v" * (1 << 20)
        attempt("name", lambda: pb_utils.MetricFamily("n" * 129, "", GAUGE))
        attempt("description", lambda: pb_utils.MetricFamily("bounds_described", "d" * 4097, GAUGE))
        attempt("label name", lambda: gauge.Metric(labels={"k" * 129: "v"}))
        for i in range(3):
            attempt("label value", lambda: gauge.Metric(labels={"i": str(i) + mebibyte}))
        attempt("buckets", lambda: histogram.Metric(labels={}, buckets=list(range(1, 66))))
        self.held.append(histogram.Metric(labels={}, buckets=list(range(1, 65))))
        self.fill("families", lambda n: pb_utils.MetricFamily(f"bounds_family_{n}", "", GAUGE))
        self.fill("bytes", lambda n: gauge.Metric(labels={"i": f"{n:04}{KIB[4:]}"}))

    def fill(self, what, create):
        """Holds what `create` makes until it is refused, and logs the refusal."""
        for n in range(5000):
            try:
                self.held.append(create(n))
            except pb_utils.TritonModelException as e:
                pb_utils.Logger.log_info(f"bounds refused {what} after {n}: " + e.message())
                return
        pb_utils.Logger.log_error(f"bounds: accepted {what} without end")

    def execute(self, requests):
        responses = []
        for request in requests:
            for i in range(300):
                with pb_utils.Span(f"bounds-{i}") as span:
                    for j in range(20):
                        span.set_attribute(f"k{j}", KIB)
                    span.add_event("step", {f"a{j}": KIB for j in range(50)})
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", tensor)]))
        return responses
