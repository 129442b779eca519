/* The telemetry probe with the C SDK (tests/test_guest_telemetry.py; the same probe is written
 * with every SDK). Per request: probe_requests_total +1, 2.5 observed in probe_value (buckets 1,
 * 10, 100), a span c-work (attribute lang) with a child c-inner that has an event step. OUTPUT0
 * is INPUT0 (the handle renamed). */
#include "tessera.h"

static tessera_metric_t requests, values;

bool tessera_initialize(const tessera_args_t *args, tessera_error_t *error) {
    (void)args;
    tessera_metric_family_t counter, histogram;
    static const char *const labels[] = {"lang", "c"};
    static const double buckets[] = {1, 10, 100};
    if (!tessera_metric_family_new("probe_requests_total", "Requests the probe saw", TESSERA_COUNTER, &counter, error) ||
        !tessera_metric_family_new("probe_value", "Values the probe observed", TESSERA_HISTOGRAM, &histogram, error) ||
        !tessera_metric_new(counter, labels, 1, NULL, 0, &requests, error) ||
        !tessera_metric_new(histogram, labels, 1, buckets, 3, &values, error)) {
        return false;
    }
    /* The series keep their families alive. */
    tessera_metric_family_drop(counter);
    tessera_metric_family_drop(histogram);
    return true;
}

void tessera_execute(const tessera_request_t *batch, size_t count, tessera_responses_t *responses) {
    for (size_t i = 0; i < count; i++) {
        tessera_span_t span = tessera_span_start("c-work", NULL);
        tessera_span_set_string(span, "lang", "c");
        tessera_span_t inner = tessera_span_start("c-inner", &span);
        tessera_span_event(inner, "step");
        tessera_span_end(inner);
        tessera_error_t error;
        if (!tessera_metric_increment(requests, 1, &error) || !tessera_metric_observe(values, 2.5, &error)) {
            tessera_respond_error(responses, i, error.code, "%s", error.message);
            tessera_span_end(span);
            continue;
        }
        tessera_tensor_t input;
        if (!tessera_input(batch[i], "INPUT0", &input)) {
            tessera_respond_error(responses, i, TESSERA_INVALID_ARG, "input 'INPUT0' is required");
            tessera_span_end(span);
            continue;
        }
        tessera_tensor_t output = tessera_tensor_rename(input, "OUTPUT0");
        tessera_tensor_drop(input);
        tessera_respond(responses, i, &output, 1);
        tessera_span_end(span);
    }
}
