# The telemetry probe with the Python SDK (tests/test_guest_telemetry.py; the same probe is
# written with every SDK). Per request: probe_requests_total +1, 2.5 observed in probe_value
# (buckets 1, 10, 100), a span python-work (attribute lang) with a child python-inner that has an
# event step. OUTPUT0 is INPUT0. At initialize it logs the messages of what Triton refuses.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        counter = pb_utils.MetricFamily("probe_requests_total", "Requests the probe saw",
                                        pb_utils.MetricFamily.COUNTER)
        histogram = pb_utils.MetricFamily("probe_value", "Values the probe observed",
                                          pb_utils.MetricFamily.HISTOGRAM)
        self.requests = counter.Metric(labels={"lang": "python"})
        self.values = histogram.Metric(labels={"lang": "python"}, buckets=[1, 10, 100])
        for attempt in (lambda: self.requests.increment(-1),
                        lambda: self.requests.set(3),
                        lambda: histogram.Metric(labels={"lang": "nobuckets"}),
                        lambda: pb_utils.MetricFamily("nv_inference_count", "", pb_utils.MetricFamily.GAUGE),
                        lambda: counter.Metric(labels={"model": "someone_else"})):
            try:
                attempt()
                pb_utils.Logger.log_error("probe: accepted what should be refused")
            except pb_utils.TritonModelException as e:
                pb_utils.Logger.log_info("probe refused: " + e.message())

    def execute(self, requests):
        responses = []
        for request in requests:
            with pb_utils.Span("python-work") as span:
                span.set_attribute("lang", "python")
                with pb_utils.Span("python-inner", parent=span) as inner:
                    inner.add_event("step", {"n": 1})
                self.requests.increment(1)
                self.values.observe(2.5)
                tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", tensor)]))
        return responses
