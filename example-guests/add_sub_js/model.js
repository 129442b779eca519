// add_sub as a Tessera guest written in JavaScript: OUTPUT0 = INPUT0 + INPUT1,
// OUTPUT1 = INPUT0 - INPUT1. Ported from Triton's python_backend examples/add_sub/model.py: the
// same class and methods, with typed arrays where the Python model has numpy.
// Build: tessera guest build example-guests/add_sub_js -o model.wasm
import {
  InferenceResponse,
  Tensor,
  getInputTensorByName,
  getOutputConfigByName,
  tritonStringToDatatype,
} from './tessera.js';

export class TritonPythonModel {
  initialize(args) {
    const config = JSON.parse(args.model_config);
    this.output0Datatype = tritonStringToDatatype(getOutputConfigByName(config, 'OUTPUT0').data_type);
    this.output1Datatype = tritonStringToDatatype(getOutputConfigByName(config, 'OUTPUT1').data_type);
  }

  execute(requests) {
    return requests.map((request) => {
      const in0 = getInputTensorByName(request, 'INPUT0');
      const in1 = getInputTensorByName(request, 'INPUT1');
      const a = in0.asArray(); // Float32Array
      const b = in1.asArray();
      const sum = a.map((x, i) => x + b[i]);
      const diff = a.map((x, i) => x - b[i]);
      return new InferenceResponse({
        outputTensors: [
          new Tensor('OUTPUT0', sum, this.output0Datatype, in0.shape()),
          new Tensor('OUTPUT1', diff, this.output1Datatype, in0.shape()),
        ],
      });
    });
  }

  finalize() {
    console.log('Cleaning up...');
  }
}
