/* add_sub as a Tessera guest written in C: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1
 * (FP32, any shape the config allows; the two inputs must have the same shape).
 * Build: tessera guest build example-guests/add_sub_c -o model.wasm */
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

/* Answers one request, or returns false with `error` filled. */
static bool add_sub(tessera_request_t request, tessera_tensor_t outputs[2], tessera_error_t *error) {
    tessera_tensor_t in0, in1;
    if (!tessera_input(request, "INPUT0", &in0)) {
        error->code = TESSERA_INVALID_ARG;
        strcpy(error->message, "input 'INPUT0' is required");
        return false;
    }
    if (!tessera_input(request, "INPUT1", &in1)) {
        tessera_tensor_drop(in0);
        error->code = TESSERA_INVALID_ARG;
        strcpy(error->message, "input 'INPUT1' is required");
        return false;
    }
    tessera_data_t a, b;
    tessera_tensor_read(in0, &a);
    tessera_tensor_read(in1, &b);
    tessera_tensor_drop(in0);
    tessera_tensor_drop(in1);
    bool ok = a.datatype == TESSERA_FP32 && b.datatype == TESSERA_FP32 && a.size == b.size;
    if (!ok) {
        error->code = TESSERA_INVALID_ARG;
        strcpy(error->message, "INPUT0 and INPUT1 must be FP32 tensors of the same shape");
    } else {
        size_t n = a.size / sizeof(float);
        const float *x = (const float *)a.data, *y = (const float *)b.data;
        float *sum = malloc(a.size ? a.size : 1), *diff = malloc(a.size ? a.size : 1);
        for (size_t i = 0; i < n; i++) {
            sum[i] = x[i] + y[i];
            diff[i] = x[i] - y[i];
        }
        ok = tessera_tensor_new("OUTPUT0", TESSERA_FP32, a.shape, a.rank, sum, a.size, &outputs[0], error);
        if (ok && !tessera_tensor_new("OUTPUT1", TESSERA_FP32, a.shape, a.rank, diff, a.size, &outputs[1], error)) {
            tessera_tensor_drop(outputs[0]);
            ok = false;
        }
        free(sum);
        free(diff);
    }
    tessera_data_free(&a);
    tessera_data_free(&b);
    return ok;
}

void tessera_execute(const tessera_request_t *requests, size_t count, tessera_responses_t *responses) {
    for (size_t i = 0; i < count; i++) {
        tessera_tensor_t outputs[2];
        tessera_error_t error;
        if (add_sub(requests[i], outputs, &error)) {
            tessera_respond(responses, i, outputs, 2);
        } else {
            tessera_respond_error(responses, i, error.code, "%s", error.message);
        }
    }
}
