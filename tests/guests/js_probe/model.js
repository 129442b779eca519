// A JavaScript guest for tests/test_guest_langs.py: what a request's `mode` parameter asks.
//   echo       OUTPUT0 = INPUT0 (the host handle renamed: no byte enters the guest)
//   copy       OUTPUT0 = a copy of INPUT0 made in the guest (asArray, then a new Tensor)
//   throw      execute throws an Error (every request of the batch fails with its message)
//   reject     an async execute whose promise rejects
//   bad_count  two responses for one request
//   bad_output OUTPUT0 = INPUT0 (a handle), then a second output whose bytes do not fit its shape:
//              the request fails, and the handle already made for OUTPUT0 must be released
//   log        console.log a line, then echo
// Config parameter fail_init = "yes": initialize throws a TritonError (the load fails).
import { InferenceResponse, Tensor, TritonError } from './tessera.js';

export class TritonPythonModel {
  initialize(args) {
    const parameters = JSON.parse(args.model_config).parameters ?? {};
    if (parameters.fail_init?.string_value === 'yes') {
      throw new TritonError('js_probe refuses to start (fail_init)', TritonError.INVALID_ARG);
    }
  }

  execute(requests) {
    const modes = requests.map((r) => r.parameters().mode ?? 'echo');
    if (modes.includes('throw')) throw new Error('boom from js_probe');
    if (modes.includes('reject')) return Promise.reject(new TypeError('rejected by js_probe'));
    const responses = requests.map((request, i) => {
      const input = request.input('INPUT0');
      if (modes[i] === 'log') console.log('hello from js_probe', { size: input.shape() });
      const output = modes[i] === 'copy' ? new Tensor('OUTPUT0', input.asArray().slice(), 'UINT8', input.shape()) : new Tensor('OUTPUT0', input);
      if (modes[i] === 'bad_output') {
        return new InferenceResponse({ outputTensors: [output, new Tensor('EXTRA', Float32Array.of(1, 2, 3), 'FP32', [5])] });
      }
      return new InferenceResponse({ outputTensors: [output] });
    });
    if (modes.includes('bad_count')) responses.push(responses[0]);
    return responses;
  }
}
