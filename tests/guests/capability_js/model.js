// The capability probe with the JavaScript SDK (tests/test_capabilities.py): the standard
// interfaces imported straight from their WIT names. OP `config:<key>` answers the value
// reversed (or <absent>); `count:<bucket>` increments key n of the bucket and answers the sum.
import { get } from 'wasi:config/store@0.2.0-rc.1';
import { open } from 'wasi:keyvalue/store@0.2.0-draft';
import { increment } from 'wasi:keyvalue/atomics@0.2.0-draft';
import { InferenceResponse, Tensor } from './tessera.js';

function answer(op) {
  const colon = op.indexOf(':');
  const verb = op.slice(0, colon);
  const rest = op.slice(colon + 1);
  if (verb === 'config') {
    const value = get(rest);
    return value === undefined ? '<absent>' : [...value].reverse().join('');
  }
  if (verb === 'count') {
    try {
      return String(increment(open(rest), 'n', 1n));
    } catch (e) {
      // A WIT error result arrives as an exception whose payload is the error variant.
      throw new Error(`key-value store: ${e.payload?.tag ?? e}`);
    }
  }
  throw new Error('unknown operation');
}

export class TritonPythonModel {
  execute(requests) {
    return requests.map((request) => {
      const op = request.input('OP').asStrings()[0];
      return new InferenceResponse({ outputTensors: [new Tensor('OUT', [answer(op)], 'BYTES', [1])] });
    });
  }
}
