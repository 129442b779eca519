// bls_add_sub in JavaScript: per request, BLS to the model named by the config parameter
// `target` (default add_sub) with the request's inputs, returning its outputs; the twin of the
// Rust bls_add_sub. Request parameter `mode` picks the BLS style:
//   "exec" (default)  one blocking call, InferenceRequest.exec();
//   "async"           `calls` (default 2) calls started together with execAsync() and awaited
//                     with Promise.all; the outputs of the first are returned, and every call
//                     must agree;
//   "stream"          a call to the decoupled model `repeat_target` (default repeat) with
//                     IN = [1, 2, 3]: OUTPUT0 gets the OUT values it streamed back, as FP32.
// No input byte enters the guest in "exec" mode: the request's tensors go on as host handles.
// Build: tessera guest build example-guests/bls_add_sub_js -o model.wasm
import { InferenceRequest, InferenceResponse, Tensor, TritonError } from './tessera.js';

export class TritonPythonModel {
  initialize(args) {
    const parameters = JSON.parse(args.model_config).parameters ?? {};
    this.target = parameters.target?.string_value ?? 'add_sub';
    this.repeatTarget = parameters.repeat_target?.string_value ?? 'repeat';
  }

  async execute(requests) {
    const responses = [];
    for (const request of requests) {
      responses.push(await this.forward(request));
    }
    return responses;
  }

  async forward(request) {
    const { mode = 'exec', calls = 2 } = request.parameters();
    const call = () =>
      new InferenceRequest({
        modelName: this.target,
        inputs: [request.input('INPUT0'), request.input('INPUT1')],
        requestedOutputNames: request.requestedOutputNames(),
      });
    if (mode === 'exec') {
      return relabel(call().exec(), this.target);
    }
    if (mode === 'async') {
      const results = await Promise.all(Array.from({ length: calls }, () => call().execAsync()));
      const failed = results.find((r) => r.hasError());
      if (failed) return relabel(failed, this.target);
      const first = results[0].outputTensors().map((t) => t.toBytes().join(','));
      if (results.some((r) => r.outputTensors().map((t) => t.toBytes().join(',')).join() !== first.join())) {
        return new InferenceResponse({ error: new TritonError('parallel BLS calls disagreed') });
      }
      return results[0];
    }
    if (mode === 'stream') {
      const repeat = new InferenceRequest({
        modelName: this.repeatTarget,
        inputs: [new Tensor('IN', Int32Array.of(1, 2, 3))],
        requestedOutputNames: ['OUT'],
      });
      const values = [];
      for (const response of repeat.exec({ decoupled: true })) {
        if (response.hasError()) return relabel(response, this.repeatTarget);
        values.push(...response.outputTensors()[0].asArray());
      }
      const shape = request.input('INPUT0').shape(); // [batch, 16]
      const out = new Float32Array(16);
      out.set(values.slice(0, 16));
      return new InferenceResponse({
        outputTensors: [new Tensor('OUTPUT0', out, 'FP32', shape), new Tensor('OUTPUT1', new Float32Array(16), 'FP32', shape)],
      });
    }
    return new InferenceResponse({
      error: new TritonError(`parameter 'mode' must be "exec", "async" or "stream", got "${mode}"`, TritonError.INVALID_ARG),
    });
  }
}

// A BLS failure, with the callee named; the code is the callee's.
function relabel(response, target) {
  if (!response.hasError()) return response;
  const error = response.error();
  return new InferenceResponse({ error: new TritonError(`BLS call to '${target}' failed: ${error.message}`, error.code()) });
}
