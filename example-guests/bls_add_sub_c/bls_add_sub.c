/* bls_add_sub as a Tessera guest written in C: one BLS call per request to the model named by
 * the config parameter `target` (default add_sub), its inputs passed on as handles and its
 * outputs returned; the twin of example-guests/bls_add_sub (Rust). No tensor byte enters the
 * guest's memory. The config must list the target in `allowed_models`.
 * Build: tessera guest build example-guests/bls_add_sub_c -o model.wasm */
#include <stdlib.h>
#include <string.h>

#include "tessera.h"

static char target[256] = "add_sub";

bool tessera_initialize(const tessera_args_t *args, tessera_error_t *error) {
    (void)error;
    tessera_config_parameter(args, "target", target, sizeof target);
    char *name = tessera_string(&args->model_name);
    tessera_log(TESSERA_LOG_INFO, "%s calls '%s'", name, target);
    free(name);
    return true;
}

void tessera_execute(const tessera_request_t *requests, size_t count, tessera_responses_t *responses) {
    static const char *const outputs[] = {"OUTPUT0", "OUTPUT1"};
    for (size_t i = 0; i < count; i++) {
        tessera_tensor_t inputs[2];
        if (!tessera_input(requests[i], "INPUT0", &inputs[0])) {
            tessera_respond_error(responses, i, TESSERA_INVALID_ARG, "input 'INPUT0' is required");
            continue;
        }
        if (!tessera_input(requests[i], "INPUT1", &inputs[1])) {
            tessera_tensor_drop(inputs[0]);
            tessera_respond_error(responses, i, TESSERA_INVALID_ARG, "input 'INPUT1' is required");
            continue;
        }
        tessera_tensors_t result;
        tessera_error_t error;
        if (tessera_infer(target, -1, inputs, 2, outputs, 2, &result, &error)) {
            tessera_respond(responses, i, result.items, result.len);
            free(result.items); /* the handles went with the response */
        } else {
            tessera_respond_error(responses, i, error.code, "BLS call to '%s': %s", target, error.message);
        }
        tessera_tensor_drop(inputs[0]);
        tessera_tensor_drop(inputs[1]);
    }
}
