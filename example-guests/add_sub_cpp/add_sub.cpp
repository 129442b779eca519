// add_sub as a Tessera guest written in C++ (libc++ for wasm32-wasi, no exceptions): the same
// model as example-guests/add_sub_c, with std::vector and std::string.
// Build: tessera guest build example-guests/add_sub_cpp -o model.wasm
#include <string>
#include <vector>

#include "tessera.h"

namespace {

// A tensor handle owned by this scope.
struct Owned {
    tessera_tensor_t handle{};
    bool held = false;
    ~Owned() {
        if (held) tessera_tensor_drop(handle);
    }
};

std::vector<float> floats(tessera_tensor_t tensor, std::vector<int64_t> &shape, tessera_datatype_t &datatype) {
    tessera_data_t data;
    tessera_tensor_read(tensor, &data);
    const float *values = reinterpret_cast<const float *>(data.data);
    std::vector<float> out(values, values + data.size / sizeof(float));
    shape.assign(data.shape, data.shape + data.rank);
    datatype = data.datatype;
    tessera_data_free(&data);
    return out;
}

std::string answer(tessera_request_t request, tessera_tensor_t outputs[2]) {
    Owned in0, in1;
    if (!(in0.held = tessera_input(request, "INPUT0", &in0.handle))) return "input 'INPUT0' is required";
    if (!(in1.held = tessera_input(request, "INPUT1", &in1.handle))) return "input 'INPUT1' is required";
    std::vector<int64_t> shape0, shape1;
    tessera_datatype_t type0, type1;
    std::vector<float> a = floats(in0.handle, shape0, type0), b = floats(in1.handle, shape1, type1);
    if (type0 != TESSERA_FP32 || type1 != TESSERA_FP32 || shape0 != shape1) {
        return "INPUT0 and INPUT1 must be FP32 tensors of the same shape";
    }
    std::vector<float> sum(a.size()), diff(a.size());
    for (size_t i = 0; i < a.size(); i++) {
        sum[i] = a[i] + b[i];
        diff[i] = a[i] - b[i];
    }
    tessera_error_t error;
    size_t bytes = a.size() * sizeof(float);
    if (!tessera_tensor_new("OUTPUT0", TESSERA_FP32, shape0.data(), shape0.size(), sum.data(), bytes, &outputs[0],
                            &error)) {
        return error.message;
    }
    if (!tessera_tensor_new("OUTPUT1", TESSERA_FP32, shape0.data(), shape0.size(), diff.data(), bytes, &outputs[1],
                            &error)) {
        tessera_tensor_drop(outputs[0]);
        return error.message;
    }
    return {};
}

}  // namespace

extern "C" void tessera_execute(const tessera_request_t *requests, size_t count, tessera_responses_t *responses) {
    for (size_t i = 0; i < count; i++) {
        tessera_tensor_t outputs[2];
        std::string failure = answer(requests[i], outputs);
        if (failure.empty()) {
            tessera_respond(responses, i, outputs, 2);
        } else {
            tessera_respond_error(responses, i, TESSERA_INVALID_ARG, "%s", failure.c_str());
        }
    }
}
