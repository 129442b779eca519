/* A C guest for tests/test_guest_langs.py that uses libc's stdio (printf, fopen): the build adapts
 * its WASI preview1 imports to WASI 0.2. OUTPUT0 = INPUT0; GREETING = the contents of
 * /model/greeting.txt (readable only under the model's `filesystem: read-only` grant), or the
 * reason it could not be opened. */
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

void tessera_execute(const tessera_request_t *requests, size_t count, tessera_responses_t *responses) {
    printf("c_probe: %zu request(s)\n", count); /* goes nowhere, and must not fail */
    for (size_t i = 0; i < count; i++) {
        tessera_tensor_t input;
        if (!tessera_input(requests[i], "INPUT0", &input)) {
            tessera_respond_error(responses, i, TESSERA_INVALID_ARG, "input 'INPUT0' is required");
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
        tessera_tensor_t outputs[2];
        tessera_error_t error;
        outputs[0] = tessera_tensor_rename(input, "OUTPUT0");
        tessera_tensor_drop(input);
        if (!tessera_tensor_new("GREETING", TESSERA_BYTES, &one, 1, element, 4 + len, &outputs[1], &error)) {
            tessera_tensor_drop(outputs[0]);
            tessera_respond_error(responses, i, error.code, "%s", error.message);
            continue;
        }
        tessera_respond(responses, i, outputs, 2);
    }
}
