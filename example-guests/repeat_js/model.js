// repeat as a decoupled Tessera guest written in JavaScript, like Triton's repeat backend: for
// input IN (INT32 [N]) it sends N responses, the i-th with OUT = IN[i] (INT32 [1]) and IDX = i
// (UINT32 [1]), then the final flag alone. The config needs
// model_transaction_policy { decoupled: true }. The twin of the Rust repeat guest.
// Build: tessera guest build example-guests/repeat_js -o model.wasm
import { InferenceResponse, Tensor, TRITONSERVER_RESPONSE_COMPLETE_FINAL, TritonError } from './tessera.js';

export class TritonPythonModel {
  execute(requests) {
    for (const request of requests) {
      const sender = request.getResponseSender();
      const input = request.input('IN');
      if (!input) {
        sender.send(new InferenceResponse({ error: new TritonError("input 'IN' is required", TritonError.INVALID_ARG) }), TRITONSERVER_RESPONSE_COMPLETE_FINAL);
        continue;
      }
      const wanted = new Set(request.requestedOutputNames());
      input.asArray().forEach((value, i) => {
        const outputs = [];
        if (wanted.has('OUT')) outputs.push(new Tensor('OUT', Int32Array.of(value)));
        if (wanted.has('IDX')) outputs.push(new Tensor('IDX', Uint32Array.of(i)));
        sender.send(new InferenceResponse({ outputTensors: outputs }));
      });
      sender.send(undefined, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    }
    // Decoupled: everything went through the senders.
  }
}
