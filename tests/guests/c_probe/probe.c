/* A C guest for tests/test_guest_langs.py that uses libc's stdio (printf, fopen): the build adapts
 * its WASI preview1 imports to WASI 0.2. OUTPUT0 = INPUT0 (read into the guest and written back,
 * so an empty tensor goes through the SDK's copies); GREETING = the contents of
 * /model/greeting.txt (readable only under the model's `filesystem: read-only` grant), or the
 * reason it could not be opened. Decoupled (config model_transaction_policy): two responses of
 * OUTPUT0 per request through the sender, then the final flag. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

static void greeting(char *out, size_t size) {
    FILE *f = fopen("/model/greeting.txt", "r");
    if (!f) {
        snprintf(out, size, "cannot open /model/greeting.txt: %s", strerror(errno));
        return;
    }
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* OUTPUT0: a copy of the input made in the guest. */
static bool copy_input(tessera_request_t request, tessera_tensor_t *out, tessera_error_t *error) {
    tessera_tensor_t input;
    if (!tessera_input(request, "INPUT0", &input)) {
        error->code = TESSERA_INVALID_ARG;
        strcpy(error->message, "input 'INPUT0' is required");
        return false;
    }
    tessera_data_t data;
    tessera_tensor_read(input, &data);
    tessera_tensor_drop(input);
    bool ok = tessera_tensor_new("OUTPUT0", data.datatype, data.shape, data.rank, data.data, data.size, out, error);
    tessera_data_free(&data);
    return ok;
}

static void stream(tessera_request_t request) {
    tessera_sender_t sender = tessera_sender(request);
    tessera_error_t error;
    for (int i = 0; i < 2; i++) {
        tessera_tensor_t output;
        if (!copy_input(request, &output, &error)) {
            tessera_send_error(sender, error.code, error.message, true);
            tessera_sender_drop(sender);
            return;
        }
        tessera_send(sender, &output, 1, false, &error);
    }
    tessera_send(sender, NULL, 0, true, &error);
    tessera_sender_drop(sender);
}

void tessera_execute(const tessera_request_t *requests, size_t count, tessera_responses_t *responses) {
    printf("c_probe: %zu request(s)\n", count); /* goes nowhere, and must not fail */
    for (size_t i = 0; i < count; i++) {
        if (tessera_decoupled()) {
            stream(requests[i]);
            continue;
        }
        tessera_tensor_t outputs[2];
        tessera_error_t error;
        if (!copy_input(requests[i], &outputs[0], &error)) {
            tessera_respond_error(responses, i, error.code, "%s", error.message);
            continue;
        }
        char text[256];
        greeting(text, sizeof text);
        size_t len = strlen(text);
        uint8_t element[4 + sizeof text];
        element[0] = (uint8_t)len;
        element[1] = (uint8_t)(len >> 8);
        element[2] = element[3] = 0;
        memcpy(element + 4, text, len);
        int64_t one = 1;
        if (!tessera_tensor_new("GREETING", TESSERA_BYTES, &one, 1, element, 4 + len, &outputs[1], &error)) {
            tessera_tensor_drop(outputs[0]);
            tessera_respond_error(responses, i, error.code, "%s", error.message);
            continue;
        }
        tessera_respond(responses, i, outputs, 2);
    }
}
