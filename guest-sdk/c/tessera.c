/* tessera.c: the C SDK's glue between the generated bindings (model_nn.h) and tessera.h. */
#include "tessera.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tessera_responses {
    model_nn_list_result_list_own_tensor_error_t *results;
    bool *answered;
};

/* The model's config says `model_transaction_policy { decoupled: true }` (read at initialize). */
static bool decoupled = false;

bool tessera_decoupled(void) {
    return decoupled;
}

/* ---- small helpers ------------------------------------------------------------------------- */

static model_nn_string_t borrowed(const char *s) {
    model_nn_string_t out;
    model_nn_string_set(&out, s ? s : "");
    return out;
}

static void fill_error(tessera_error_t *error, tessera_code_t code, const char *message, size_t len) {
    if (!error) return;
    error->code = code;
    if (len >= sizeof error->message) len = sizeof error->message - 1;
    memcpy(error->message, message, len);
    error->message[len] = '\0';
}

/* Moves a host error into `error` and frees the host's copy. */
static void take_error(tessera_model_types_error_t *host, tessera_error_t *error) {
    fill_error(error, host->code, (const char *)host->message.ptr, host->message.len);
    tessera_model_types_error_free(host);
}

char *tessera_string(const model_nn_string_t *s) {
    char *out = malloc(s->len + 1);
    if (!out) return NULL;
    memcpy(out, s->ptr, s->len);
    out[s->len] = '\0';
    return out;
}

static bool string_is(const model_nn_string_t *s, const char *text) {
    size_t len = strlen(text);
    return s->len == len && memcmp(s->ptr, text, len) == 0;
}

/* ---- the exports ---------------------------------------------------------------------------- */

__attribute__((weak)) bool tessera_initialize(const tessera_args_t *args, tessera_error_t *error) {
    (void)args;
    (void)error;
    return true;
}

__attribute__((weak)) void tessera_finalize(void) {}

bool exports_model_nn_initialize(model_nn_initialize_args_t *args, model_nn_error_t *err) {
    char *config = tessera_string(&args->model_config);
    /* The server's /config JSON is compact: `"decoupled":true` appears only under the policy. */
    decoupled = config && strstr(config, "\"decoupled\":true") != NULL;
    free(config);
    tessera_error_t error = {TESSERA_INTERNAL, "initialize failed"};
    bool ok = tessera_initialize(args, &error);
    model_nn_initialize_args_free(args);
    if (!ok) {
        err->code = error.code;
        /* Freed by the bindings' post-return: it must be malloc'd. */
        model_nn_string_dup(&err->message, error.message);
    }
    return ok;
}

void exports_model_nn_execute(model_nn_list_own_request_t *requests, model_nn_list_result_list_own_tensor_error_t *ret) {
    size_t count = requests->len;
    ret->len = count;
    ret->ptr = calloc(count ? count : 1, sizeof *ret->ptr);
    bool *answered = calloc(count ? count : 1, sizeof *answered);
    if (!ret->ptr || !answered) abort();
    tessera_responses_t responses = {ret, answered};
    tessera_execute(requests->ptr, count, &responses);
    for (size_t i = 0; i < count; i++) {
        if (!answered[i] && !decoupled) {
            tessera_respond_error(&responses, i, TESSERA_INTERNAL,
                                  "the model's tessera_execute gave no response for request %zu", i);
        }
        tessera_model_types_request_drop_own(requests->ptr[i]);
    }
    if (decoupled) {
        /* A decoupled model answers through its senders and returns no results. */
        for (size_t i = 0; i < count; i++) {
            if (!answered[i]) continue;
            tessera_log(TESSERA_LOG_WARN, "decoupled model: tessera_respond ignored (use tessera_send)");
            model_nn_result_list_own_tensor_error_t *result = &ret->ptr[i];
            if (result->is_err) {
                model_nn_string_free(&result->val.err.message);
            } else {
                for (size_t j = 0; j < result->val.ok.len; j++) tessera_tensor_drop(result->val.ok.ptr[j]);
                free(result->val.ok.ptr);
            }
        }
        free(ret->ptr);
        ret->ptr = NULL;
        ret->len = 0;
    }
    free(answered);
    model_nn_list_own_request_free(requests);
}

void exports_model_nn_finalize(void) {
    tessera_finalize();
}

/* ---- answering ------------------------------------------------------------------------------ */

static model_nn_result_list_own_tensor_error_t *slot(tessera_responses_t *responses, size_t index) {
    if (index >= responses->results->len) {
        tessera_log(TESSERA_LOG_ERROR, "response index %zu out of range (batch of %zu)", index,
                    responses->results->len);
        return NULL;
    }
    model_nn_result_list_own_tensor_error_t *result = &responses->results->ptr[index];
    if (responses->answered[index]) {
        /* Answered twice: the later answer wins, the earlier one is released. */
        if (result->is_err) {
            model_nn_string_free(&result->val.err.message);
        } else {
            for (size_t i = 0; i < result->val.ok.len; i++) tessera_tensor_drop(result->val.ok.ptr[i]);
            free(result->val.ok.ptr);
        }
    }
    responses->answered[index] = true;
    return result;
}

void tessera_respond(tessera_responses_t *responses, size_t index, const tessera_tensor_t *outputs, size_t count) {
    model_nn_result_list_own_tensor_error_t *result = slot(responses, index);
    if (!result) {
        for (size_t i = 0; i < count; i++) tessera_tensor_drop(outputs[i]);
        return;
    }
    result->is_err = false;
    result->val.ok.len = count;
    result->val.ok.ptr = NULL; /* the bindings' post-return frees only non-empty lists */
    if (count) {
        result->val.ok.ptr = malloc(count * sizeof(tessera_tensor_t));
        if (!result->val.ok.ptr) abort();
        memcpy(result->val.ok.ptr, outputs, count * sizeof(tessera_tensor_t));
    }
}

void tessera_respond_error(tessera_responses_t *responses, size_t index, tessera_code_t code, const char *format, ...) {
    model_nn_result_list_own_tensor_error_t *result = slot(responses, index);
    if (!result) return;
    char message[1024];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    result->is_err = true;
    result->val.err.code = code;
    model_nn_string_dup(&result->val.err.message, message);
}

/* ---- requests ------------------------------------------------------------------------------- */

bool tessera_input(tessera_request_t request, const char *name, tessera_tensor_t *out) {
    model_nn_string_t n = borrowed(name);
    return tessera_model_types_method_request_input(tessera_model_types_borrow_request(request), &n, out);
}

char *tessera_request_id(tessera_request_t request) {
    model_nn_string_t id;
    tessera_model_types_method_request_id(tessera_model_types_borrow_request(request), &id);
    char *out = tessera_string(&id);
    model_nn_string_free(&id);
    return out;
}

/* Calls `found` with the parameter `key`, if the request has one; returns what it returns. */
static bool with_parameter(tessera_request_t request, const char *key,
                           bool (*found)(const tessera_model_types_param_value_t *, void *), void *context) {
    tessera_model_types_list_parameter_t params;
    tessera_model_types_method_request_parameters(tessera_model_types_borrow_request(request), &params);
    bool result = false;
    for (size_t i = 0; i < params.len; i++) {
        if (string_is(&params.ptr[i].key, key)) {
            result = found(&params.ptr[i].value, context);
            break;
        }
    }
    tessera_model_types_list_parameter_free(&params);
    return result;
}

static bool read_int(const tessera_model_types_param_value_t *value, void *out) {
    if (value->tag != TESSERA_MODEL_TYPES_PARAM_VALUE_INT) return false;
    *(int64_t *)out = value->val.int_;
    return true;
}

int64_t tessera_parameter_int(tessera_request_t request, const char *key, int64_t fallback) {
    int64_t value = fallback;
    return with_parameter(request, key, read_int, &value) ? value : fallback;
}

struct string_buffer {
    char *buffer;
    size_t size;
};

static bool read_string(const tessera_model_types_param_value_t *value, void *out) {
    struct string_buffer *target = out;
    if (value->tag != TESSERA_MODEL_TYPES_PARAM_VALUE_STRING || target->size == 0) return false;
    size_t len = value->val.string.len < target->size - 1 ? value->val.string.len : target->size - 1;
    memcpy(target->buffer, value->val.string.ptr, len);
    target->buffer[len] = '\0';
    return true;
}

bool tessera_parameter_string(tessera_request_t request, const char *key, char *buffer, size_t size) {
    struct string_buffer target = {buffer, size};
    return with_parameter(request, key, read_string, &target);
}

/* ---- tensors -------------------------------------------------------------------------------- */

bool tessera_tensor_new(const char *name, tessera_datatype_t datatype, const int64_t *shape, size_t rank,
                        const void *data, size_t size, tessera_tensor_t *out, tessera_error_t *error) {
    model_nn_string_t n = borrowed(name);
    model_nn_list_s64_t dims = {(int64_t *)shape, rank};
    model_nn_list_u8_t bytes = {(uint8_t *)data, size};
    tessera_model_types_error_t host_error;
    if (tessera_model_types_static_tensor_create(&n, datatype, &dims, &bytes, out, &host_error)) return true;
    take_error(&host_error, error);
    return false;
}

tessera_tensor_t tessera_tensor_rename(tessera_tensor_t tensor, const char *name) {
    model_nn_string_t n = borrowed(name);
    return tessera_model_types_method_tensor_with_name(tessera_model_types_borrow_tensor(tensor), &n);
}

void tessera_tensor_read(tessera_tensor_t tensor, tessera_data_t *out) {
    tessera_model_types_borrow_tensor_t t = tessera_model_types_borrow_tensor(tensor);
    model_nn_string_t name;
    tessera_model_types_method_tensor_name(t, &name);
    out->name = tessera_string(&name);
    model_nn_string_free(&name);
    /* Datatype, shape and bytes in one host call. An empty list comes back with a dangling
     * non-NULL pointer (the canonical ABI allocates nothing for it): keep NULL instead, so that
     * tessera_data_free can free what it holds. */
    tessera_model_types_tensor_data_t read;
    tessera_model_types_method_tensor_read(t, &read);
    out->datatype = read.datatype;
    out->shape = read.shape.len ? read.shape.ptr : NULL;
    out->rank = read.shape.len;
    out->data = read.data.len ? read.data.ptr : NULL;
    out->size = read.data.len;
}

void tessera_data_free(tessera_data_t *data) {
    free(data->name);
    free(data->shape);
    free(data->data);
    memset(data, 0, sizeof *data);
}

size_t tessera_element_count(const int64_t *shape, size_t rank) {
    size_t count = 1;
    for (size_t i = 0; i < rank; i++) count *= shape[i] > 0 ? (size_t)shape[i] : 0;
    return count;
}

void tessera_tensor_drop(tessera_tensor_t tensor) {
    tessera_model_types_tensor_drop_own(tensor);
}

void tessera_tensors_free(tessera_tensors_t *tensors) {
    for (size_t i = 0; i < tensors->len; i++) tessera_tensor_drop(tensors->items[i]);
    free(tensors->items);
    tensors->items = NULL;
    tensors->len = 0;
}

/* ---- BLS ------------------------------------------------------------------------------------ */

bool tessera_infer(const char *model, int64_t version, const tessera_tensor_t *inputs, size_t input_count,
                   const char *const *outputs, size_t output_count, tessera_tensors_t *result,
                   tessera_error_t *error) {
    model_nn_string_t m = borrowed(model);
    tessera_model_types_borrow_tensor_t *borrows = calloc(input_count ? input_count : 1, sizeof *borrows);
    model_nn_string_t *names = calloc(output_count ? output_count : 1, sizeof *names);
    if (!borrows || !names) abort();
    for (size_t i = 0; i < input_count; i++) borrows[i] = tessera_model_types_borrow_tensor(inputs[i]);
    for (size_t i = 0; i < output_count; i++) names[i] = borrowed(outputs[i]);
    tessera_model_host_list_borrow_tensor_t input_list = {borrows, input_count};
    model_nn_list_string_t output_list = {names, output_count};
    tessera_model_host_list_parameter_t parameters = {NULL, 0};
    tessera_model_host_list_own_tensor_t got;
    tessera_model_host_error_t host_error;
    bool ok = tessera_model_host_infer(&m, version > 0 ? &version : NULL, &input_list, &output_list, &parameters,
                                       &got, &host_error);
    free(borrows);
    free(names);
    if (!ok) {
        take_error(&host_error, error);
        result->items = NULL;
        result->len = 0;
        return false;
    }
    result->items = got.len ? got.ptr : NULL; /* see tessera_tensor_read */
    result->len = got.len;
    return true;
}

/* ---- decoupled ------------------------------------------------------------------------------ */

tessera_sender_t tessera_sender(tessera_request_t request) {
    return tessera_model_types_method_request_sender(tessera_model_types_borrow_request(request));
}

bool tessera_send(tessera_sender_t sender, const tessera_tensor_t *outputs, size_t count, bool final,
                  tessera_error_t *error) {
    tessera_model_types_list_own_tensor_t list = {(tessera_tensor_t *)outputs, count};
    tessera_model_types_error_t host_error;
    if (tessera_model_types_method_response_sender_send(tessera_model_types_borrow_response_sender(sender), &list,
                                                         final, &host_error)) {
        return true;
    }
    take_error(&host_error, error);
    return false;
}

bool tessera_send_error(tessera_sender_t sender, tessera_code_t code, const char *message, bool final) {
    tessera_model_types_error_t sent = {code, borrowed(message)};
    tessera_model_types_error_t host_error;
    if (tessera_model_types_method_response_sender_send_error(tessera_model_types_borrow_response_sender(sender),
                                                               &sent, final, &host_error)) {
        return true;
    }
    tessera_model_types_error_free(&host_error);
    return false;
}

void tessera_sender_drop(tessera_sender_t sender) {
    tessera_model_types_response_sender_drop_own(sender);
}

/* ---- logging and config --------------------------------------------------------------------- */

void tessera_log(tessera_log_level_t level, const char *format, ...) {
    char message[2048];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    model_nn_string_t m = borrowed(message);
    tessera_model_host_log((tessera_model_host_log_level_t)level, &m);
}

/* Finds `"key":{"string_value":"..."}` in the config JSON: the shape Triton's /config gives
 * parameters. Not a JSON parser: escapes in the value are copied as they are. */
bool tessera_config_parameter(const tessera_args_t *args, const char *key, char *buffer, size_t size) {
    char *config = tessera_string(&args->model_config);
    if (!config || size == 0) {
        free(config);
        return false;
    }
    char *params = strstr(config, "\"parameters\"");
    size_t key_len = strlen(key);
    char *pattern = malloc(key_len + 4);
    bool found = false;
    if (params && pattern) {
        snprintf(pattern, key_len + 4, "\"%s\"", key);
        char *at = strstr(params, pattern);
        char *value = at ? strstr(at + key_len + 2, "\"string_value\"") : NULL;
        char *open = value ? strchr(value + 14, '"') : NULL;
        char *close = open ? strchr(open + 1, '"') : NULL;
        if (close) {
            size_t len = (size_t)(close - open - 1);
            if (len >= size) len = size - 1;
            memcpy(buffer, open + 1, len);
            buffer[len] = '\0';
            found = true;
        }
    }
    free(pattern);
    free(config);
    return found;
}

bool tessera_sender_is_cancelled(tessera_sender_t sender) {
    return tessera_model_types_method_response_sender_is_cancelled(tessera_model_types_borrow_response_sender(sender));
}

/* ---- the model's own metrics and spans ------------------------------------------------------ */

bool tessera_metric_family_new(const char *name, const char *description, tessera_metric_kind_t kind,
                               tessera_metric_family_t *out, tessera_error_t *error) {
    model_nn_string_t n = borrowed(name), d = borrowed(description);
    tessera_model_types_error_t host_error;
    if (tessera_model_telemetry_static_metric_family_create(&n, &d, (tessera_model_telemetry_metric_kind_t)kind, out,
                                                             &host_error)) {
        return true;
    }
    take_error(&host_error, error);
    return false;
}

bool tessera_metric_new(tessera_metric_family_t family, const char *const *labels, size_t label_count,
                        const double *buckets, size_t bucket_count, tessera_metric_t *out, tessera_error_t *error) {
    model_nn_tuple2_string_string_t *pairs = calloc(label_count ? label_count : 1, sizeof *pairs);
    if (!pairs) abort();
    for (size_t i = 0; i < label_count; i++) {
        pairs[i].f0 = borrowed(labels[2 * i]);
        pairs[i].f1 = borrowed(labels[2 * i + 1]);
    }
    model_nn_list_tuple2_string_string_t list = {pairs, label_count};
    model_nn_list_f64_t bounds = {(double *)buckets, bucket_count};
    tessera_model_types_error_t host_error;
    bool ok = tessera_model_telemetry_method_metric_family_metric(tessera_model_telemetry_borrow_metric_family(family),
                                                                   &list, buckets ? &bounds : NULL, out, &host_error);
    free(pairs);
    if (!ok) take_error(&host_error, error);
    return ok;
}

#define METRIC_CALL(call)                                                                      \
    do {                                                                                       \
        tessera_model_types_error_t host_error;                                                \
        if (call) return true;                                                                 \
        take_error(&host_error, error);                                                        \
        return false;                                                                          \
    } while (0)

bool tessera_metric_increment(tessera_metric_t metric, double value, tessera_error_t *error) {
    METRIC_CALL(tessera_model_telemetry_method_metric_increment(tessera_model_telemetry_borrow_metric(metric), value,
                                                                &host_error));
}

bool tessera_metric_set(tessera_metric_t metric, double value, tessera_error_t *error) {
    METRIC_CALL(tessera_model_telemetry_method_metric_set(tessera_model_telemetry_borrow_metric(metric), value,
                                                          &host_error));
}

bool tessera_metric_observe(tessera_metric_t metric, double value, tessera_error_t *error) {
    METRIC_CALL(tessera_model_telemetry_method_metric_observe(tessera_model_telemetry_borrow_metric(metric), value,
                                                              &host_error));
}

bool tessera_metric_value(tessera_metric_t metric, double *out, tessera_error_t *error) {
    METRIC_CALL(tessera_model_telemetry_method_metric_value(tessera_model_telemetry_borrow_metric(metric), out,
                                                            &host_error));
}

void tessera_metric_drop(tessera_metric_t metric) {
    tessera_model_telemetry_metric_drop_own(metric);
}

void tessera_metric_family_drop(tessera_metric_family_t family) {
    tessera_model_telemetry_metric_family_drop_own(family);
}

tessera_span_t tessera_span_start(const char *name, const tessera_span_t *parent) {
    model_nn_string_t n = borrowed(name);
    tessera_model_telemetry_borrow_span_t borrowed_parent;
    if (parent) borrowed_parent = tessera_model_telemetry_borrow_span(*parent);
    return tessera_model_telemetry_static_span_start(&n, parent ? &borrowed_parent : NULL);
}

bool tessera_span_is_recording(tessera_span_t span) {
    return tessera_model_telemetry_method_span_is_recording(tessera_model_telemetry_borrow_span(span));
}

static void span_set(tessera_span_t span, const char *key, tessera_model_types_param_value_t *value) {
    model_nn_string_t k = borrowed(key);
    tessera_model_telemetry_method_span_set_attribute(tessera_model_telemetry_borrow_span(span), &k, value);
}

void tessera_span_set_int(tessera_span_t span, const char *key, int64_t value) {
    tessera_model_types_param_value_t v = {.tag = TESSERA_MODEL_TYPES_PARAM_VALUE_INT, .val.int_ = value};
    span_set(span, key, &v);
}

void tessera_span_set_double(tessera_span_t span, const char *key, double value) {
    tessera_model_types_param_value_t v = {.tag = TESSERA_MODEL_TYPES_PARAM_VALUE_DOUBLE, .val.double_ = value};
    span_set(span, key, &v);
}

void tessera_span_set_string(tessera_span_t span, const char *key, const char *value) {
    tessera_model_types_param_value_t v = {.tag = TESSERA_MODEL_TYPES_PARAM_VALUE_STRING, .val.string = borrowed(value)};
    span_set(span, key, &v);
}

void tessera_span_event(tessera_span_t span, const char *name) {
    model_nn_string_t n = borrowed(name);
    tessera_model_telemetry_list_tuple2_string_param_value_t none = {NULL, 0};
    tessera_model_telemetry_method_span_add_event(tessera_model_telemetry_borrow_span(span), &n, &none);
}

void tessera_span_end(tessera_span_t span) {
    tessera_model_telemetry_method_span_end(tessera_model_telemetry_borrow_span(span));
    tessera_model_telemetry_span_drop_own(span);
}
