/*
 * tessera.h: write Tessera models (Triton-style custom backends) in C or C++.
 *
 * A guest defines one function, and two optional ones:
 *
 *     void tessera_execute(const tessera_request_t *requests, size_t count, tessera_responses_t *responses);
 *     bool tessera_initialize(const tessera_args_t *args, tessera_error_t *error);   // optional
 *     void tessera_finalize(void);                                                  // optional
 *
 * `tessera_execute` gets a batch of requests and answers each one, by index, with
 * `tessera_respond` (output tensors) or `tessera_respond_error`; a request left unanswered fails
 * with an error that says so. Decoupled models answer through `tessera_sender` instead and
 * leave `responses` alone. The SDK releases the requests when `tessera_execute` returns.
 *
 * Tensors are handles to bytes that live in the host: passing one to `tessera_respond`, a
 * sender or a BLS call moves no bytes; `tessera_tensor_read` copies them into guest memory and
 * `tessera_tensor_new` copies them out. Handles you receive are yours: give them back with
 * `tessera_respond` / `tessera_send` (which take them) or `tessera_tensor_drop`.
 *
 * Build: `tessera guest build DIR` (every .c/.cpp file in DIR, with this SDK and the generated
 * bindings of world `model-nn`, which also declare the standard wasi:nn interface as
 * `wasi_nn_*`). printf goes nowhere: log with `tessera_log`. See guest-sdk/c/README.md.
 */
#ifndef TESSERA_H
#define TESSERA_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef tessera_model_types_own_tensor_t tessera_tensor_t;
typedef tessera_model_types_own_request_t tessera_request_t;
typedef tessera_model_types_own_response_sender_t tessera_sender_t;
typedef tessera_model_types_data_type_t tessera_datatype_t;
typedef tessera_model_types_error_code_t tessera_code_t;
typedef model_nn_initialize_args_t tessera_args_t;

/* KServe datatypes. */
#define TESSERA_BOOL TESSERA_MODEL_TYPES_DATA_TYPE_BOOL
#define TESSERA_UINT8 TESSERA_MODEL_TYPES_DATA_TYPE_UINT8
#define TESSERA_UINT16 TESSERA_MODEL_TYPES_DATA_TYPE_UINT16
#define TESSERA_UINT32 TESSERA_MODEL_TYPES_DATA_TYPE_UINT32
#define TESSERA_UINT64 TESSERA_MODEL_TYPES_DATA_TYPE_UINT64
#define TESSERA_INT8 TESSERA_MODEL_TYPES_DATA_TYPE_INT8
#define TESSERA_INT16 TESSERA_MODEL_TYPES_DATA_TYPE_INT16
#define TESSERA_INT32 TESSERA_MODEL_TYPES_DATA_TYPE_INT32
#define TESSERA_INT64 TESSERA_MODEL_TYPES_DATA_TYPE_INT64
#define TESSERA_FP16 TESSERA_MODEL_TYPES_DATA_TYPE_FP16
#define TESSERA_BF16 TESSERA_MODEL_TYPES_DATA_TYPE_BF16
#define TESSERA_FP32 TESSERA_MODEL_TYPES_DATA_TYPE_FP32
#define TESSERA_FP64 TESSERA_MODEL_TYPES_DATA_TYPE_FP64
#define TESSERA_BYTES TESSERA_MODEL_TYPES_DATA_TYPE_BYTES

/* Triton's error codes (the doors map them to HTTP and gRPC statuses). */
#define TESSERA_UNKNOWN TESSERA_MODEL_TYPES_ERROR_CODE_UNKNOWN
#define TESSERA_INTERNAL TESSERA_MODEL_TYPES_ERROR_CODE_INTERNAL
#define TESSERA_NOT_FOUND TESSERA_MODEL_TYPES_ERROR_CODE_NOT_FOUND
#define TESSERA_INVALID_ARG TESSERA_MODEL_TYPES_ERROR_CODE_INVALID_ARG
#define TESSERA_UNAVAILABLE TESSERA_MODEL_TYPES_ERROR_CODE_UNAVAILABLE
#define TESSERA_UNSUPPORTED TESSERA_MODEL_TYPES_ERROR_CODE_UNSUPPORTED
#define TESSERA_ALREADY_EXISTS TESSERA_MODEL_TYPES_ERROR_CODE_ALREADY_EXISTS
#define TESSERA_CANCELLED TESSERA_MODEL_TYPES_ERROR_CODE_CANCELLED

typedef enum {
    TESSERA_LOG_ERROR = TESSERA_MODEL_HOST_LOG_LEVEL_ERROR,
    TESSERA_LOG_WARN = TESSERA_MODEL_HOST_LOG_LEVEL_WARN,
    TESSERA_LOG_INFO = TESSERA_MODEL_HOST_LOG_LEVEL_INFO,
    TESSERA_LOG_VERBOSE = TESSERA_MODEL_HOST_LOG_LEVEL_VERBOSE,
} tessera_log_level_t;

/* An error: a code and a message (truncated to fit). */
typedef struct {
    tessera_code_t code;
    char message[512];
} tessera_error_t;

/* A tensor's contents copied into guest memory (tessera_tensor_read); free with tessera_data_free. */
typedef struct {
    char *name;
    tessera_datatype_t datatype;
    int64_t *shape;
    size_t rank;
    uint8_t *data; /* little-endian, row-major; malloc-aligned, so it may be read as float* etc. */
    size_t size;   /* bytes */
} tessera_data_t;

/* A list of tensor handles (BLS outputs); free with tessera_tensors_free (drops the handles). */
typedef struct {
    tessera_tensor_t *items;
    size_t len;
} tessera_tensors_t;

/* Where tessera_execute puts its answers (one per request). */
typedef struct tessera_responses tessera_responses_t;

/* ---- what the guest defines ---------------------------------------------------------------- */
void tessera_execute(const tessera_request_t *requests, size_t count, tessera_responses_t *responses);
/* Optional: return false with `error` filled to fail the model's load. */
bool tessera_initialize(const tessera_args_t *args, tessera_error_t *error);
/* Optional. */
void tessera_finalize(void);
/* Whether the model is decoupled (its config's model_transaction_policy): such a model answers
 * with tessera_send and leaves `responses` alone. */
bool tessera_decoupled(void);

/* ---- answering ----------------------------------------------------------------------------- */
/* Answers request `index` with `count` outputs (the handles are taken). */
void tessera_respond(tessera_responses_t *responses, size_t index, const tessera_tensor_t *outputs, size_t count);
/* Answers request `index` with an error (printf-style message). */
void tessera_respond_error(tessera_responses_t *responses, size_t index, tessera_code_t code, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- requests ------------------------------------------------------------------------------ */
/* The request's input called `name` (a new handle), or false if it has none. */
bool tessera_input(tessera_request_t request, const char *name, tessera_tensor_t *out);
/* The request's id (malloc'd; free it). */
char *tessera_request_id(tessera_request_t request);
/* The request parameter `key` as an integer, or `fallback` when it is absent or not an integer. */
int64_t tessera_parameter_int(tessera_request_t request, const char *key, int64_t fallback);
/* The request parameter `key` as a string into `buffer`; false when absent or not a string. */
bool tessera_parameter_string(tessera_request_t request, const char *key, char *buffer, size_t size);

/* ---- tensors ------------------------------------------------------------------------------- */
/* A new host tensor: `size` bytes of `data` (copied), which must fit `datatype` and `shape`. */
bool tessera_tensor_new(const char *name, tessera_datatype_t datatype, const int64_t *shape, size_t rank,
                        const void *data, size_t size, tessera_tensor_t *out, tessera_error_t *error);
/* The same bytes under another name (no copy); `tensor` stays yours. */
tessera_tensor_t tessera_tensor_rename(tessera_tensor_t tensor, const char *name);
/* Copies the tensor's name, datatype, shape and bytes into guest memory. */
void tessera_tensor_read(tessera_tensor_t tensor, tessera_data_t *out);
void tessera_data_free(tessera_data_t *data);
/* Elements in a tensor of this shape (1 for rank 0). */
size_t tessera_element_count(const int64_t *shape, size_t rank);
void tessera_tensor_drop(tessera_tensor_t tensor);
void tessera_tensors_free(tessera_tensors_t *tensors);

/* ---- BLS: calling served models ------------------------------------------------------------ */
/* Runs `model` (version < 1: its newest ready one) on `inputs` (borrowed: they stay yours) and
 * returns the `outputs` named (none: every output). Only models the config's `allowed_models`
 * parameter lists may be called. */
bool tessera_infer(const char *model, int64_t version, const tessera_tensor_t *inputs, size_t input_count,
                   const char *const *outputs, size_t output_count, tessera_tensors_t *result,
                   tessera_error_t *error);

/* ---- decoupled models ---------------------------------------------------------------------- */
tessera_sender_t tessera_sender(tessera_request_t request);
/* Sends `count` outputs (taken) as one response; `final` closes the request's stream. */
bool tessera_send(tessera_sender_t sender, const tessera_tensor_t *outputs, size_t count, bool final,
                  tessera_error_t *error);
bool tessera_send_error(tessera_sender_t sender, tessera_code_t code, const char *message, bool final);
void tessera_sender_drop(tessera_sender_t sender);
/* Whether the request's caller has gone (a cancelled stream): sends then fail with
 * TESSERA_CANCELLED, so stop producing. */
bool tessera_sender_is_cancelled(tessera_sender_t sender);

/* ---- the model's own metrics and spans ------------------------------------------------------ */
/* Metrics on the server's /metrics, as Triton's python backend has them (pb_utils.MetricFamily):
 * a family is one metric name (the same name and kind is the same family), a metric one series
 * of it. The host labels every series with the model's `model` and `version`, refuses names that
 * begin with `nv_` or `tessera_` and caps the series a model holds. A series leaves /metrics when
 * its last handle is dropped: keep metrics in static storage from tessera_initialize. */
typedef tessera_model_telemetry_own_metric_family_t tessera_metric_family_t;
typedef tessera_model_telemetry_own_metric_t tessera_metric_t;
typedef tessera_model_telemetry_own_span_t tessera_span_t;
typedef enum {
    TESSERA_COUNTER = TESSERA_MODEL_TELEMETRY_METRIC_KIND_COUNTER,
    TESSERA_GAUGE = TESSERA_MODEL_TELEMETRY_METRIC_KIND_GAUGE,
    TESSERA_HISTOGRAM = TESSERA_MODEL_TELEMETRY_METRIC_KIND_HISTOGRAM,
} tessera_metric_kind_t;
bool tessera_metric_family_new(const char *name, const char *description, tessera_metric_kind_t kind,
                               tessera_metric_family_t *out, tessera_error_t *error);
/* The series with `label_count` labels, given as key, value, key, value, ... in `labels`;
 * `buckets` (increasing upper bounds, `bucket_count` of them) for a histogram, NULL otherwise. */
bool tessera_metric_new(tessera_metric_family_t family, const char *const *labels, size_t label_count,
                        const double *buckets, size_t bucket_count, tessera_metric_t *out, tessera_error_t *error);
bool tessera_metric_increment(tessera_metric_t metric, double value, tessera_error_t *error);
bool tessera_metric_set(tessera_metric_t metric, double value, tessera_error_t *error);
bool tessera_metric_observe(tessera_metric_t metric, double value, tessera_error_t *error);
bool tessera_metric_value(tessera_metric_t metric, double *out, tessera_error_t *error);
void tessera_metric_drop(tessera_metric_t metric);
void tessera_metric_family_drop(tessera_metric_family_t family);
/* A span of the model's own code in the trace of the request it executes (for a batch, its
 * first traced request), under the model's compute span or `parent` (NULL: none). It records
 * nothing when the request is not traced. End it with tessera_span_end (which drops the handle);
 * one still open when tessera_execute returns ends then. */
tessera_span_t tessera_span_start(const char *name, const tessera_span_t *parent);
bool tessera_span_is_recording(tessera_span_t span);
void tessera_span_set_int(tessera_span_t span, const char *key, int64_t value);
void tessera_span_set_double(tessera_span_t span, const char *key, double value);
void tessera_span_set_string(tessera_span_t span, const char *key, const char *value);
/* An event now, with no attributes. */
void tessera_span_event(tessera_span_t span, const char *name);
void tessera_span_end(tessera_span_t span);

/* ---- logging and config -------------------------------------------------------------------- */
void tessera_log(tessera_log_level_t level, const char *format, ...) __attribute__((format(printf, 2, 3)));
/* The model config's string parameter `key` (config.pbtxt `parameters`) into `buffer`; false
 * when the config has none. Reads args->model_config, the JSON `/config` returns. */
bool tessera_config_parameter(const tessera_args_t *args, const char *key, char *buffer, size_t size);
/* A string field of the initialize args as a NUL-terminated copy (malloc'd; free it). */
char *tessera_string(const model_nn_string_t *s);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_H */
