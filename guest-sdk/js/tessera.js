// tessera.js: write Tessera models (Triton-style custom backends) in JavaScript.
//
// The same shape as Triton's Python backend (triton_python_backend_utils), in JavaScript's
// spelling: a model module exports `class TritonPythonModel` with `initialize(args)`,
// `execute(requests)` (may be async) and `finalize()`, and imports what it needs from
// './tessera.js' (`tessera guest build` puts this file there):
//
//   import { Tensor, InferenceResponse, getInputTensorByName } from './tessera.js';
//   export class TritonPythonModel {
//     execute(requests) {
//       return requests.map((request) => {
//         const a = getInputTensorByName(request, 'INPUT0').asArray();   // a Float32Array
//         return new InferenceResponse({ outputTensors: [new Tensor('OUTPUT0', a.map((x) => 2 * x))] });
//       });
//     }
//   }
//
// Tensors are handles to bytes in the host until asked for: a request's input handed to a
// response or a BLS call moves no bytes through the guest. `asArray()` gives a typed array
// (Float32Array for FP32, BigInt64Array for INT64, ...; BYTES: an array of Uint8Array).
// Host handles the guest received or made during an execute are released when it returns: keep
// data (asArray()), not Tensor objects, across calls.
//
// BLS: `new InferenceRequest({ modelName, inputs, requestedOutputNames }).exec()` returns an
// InferenceResponse (errors in `.error()`); `execAsync()` starts the call and returns a Promise
// (calls started together run concurrently on the host); `exec({ decoupled: true })` iterates a
// decoupled model's responses. Decoupled models answer through `request.getResponseSender()`.
// `console.*` and `Logger` go to the server's log. `MetricFamily` puts the model's own metrics on
// the server's /metrics (Triton's pb_utils.MetricFamily), `Span` its own spans in request traces.

import {
  log as hostLog,
  infer as hostInfer,
  inferAsync as hostInferAsync,
  inferStream as hostInferStream,
} from 'tessera:model/host@0.1.0';
import { Tensor as HostTensor } from 'tessera:model/types@0.1.0';
import { MetricFamily as HostMetricFamily, Span as HostSpan } from 'tessera:model/telemetry@0.1.0';

export const TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1;
export const TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1;
export const TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2;

// ---- errors ------------------------------------------------------------------------------------

const CODES = ['unknown', 'internal', 'not-found', 'invalid-arg', 'unavailable', 'unsupported', 'already-exists', 'cancelled'];

/** An error for an InferenceResponse: new TritonError(message, code = TritonError.INTERNAL). */
export class TritonError extends Error {
  static UNKNOWN = 0;
  static INTERNAL = 1;
  static NOT_FOUND = 2;
  static INVALID_ARG = 3;
  static UNAVAILABLE = 4;
  static UNSUPPORTED = 5;
  static ALREADY_EXISTS = 6;
  static CANCELLED = 7;

  constructor(message, code = TritonError.INTERNAL) {
    super(String(message));
    this.name = 'TritonError';
    this._code = CODES[code] === undefined ? TritonError.INTERNAL : code;
  }

  code() {
    return this._code;
  }
}

/** Thrown by the SDK when a host call fails; throw it from execute() to fail the whole batch. */
export class TritonModelException extends TritonError {
  constructor(message, code = TritonError.INTERNAL) {
    super(message, code);
    this.name = 'TritonModelException';
  }
}

function witError(error) {
  if (error instanceof TritonError) return { code: CODES[error.code()], message: error.message };
  if (error && typeof error === 'object' && typeof error.payload === 'object' && error.payload?.code) {
    return { code: error.payload.code, message: String(error.payload.message) };
  }
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const stack = error instanceof Error && error.stack ? `\n${error.stack}` : '';
  return { code: 'internal', message: `${text}${stack}`.trimEnd() };
}

// A host call's error (componentize-js throws it with `payload` = { code, message }).
function fromHost(error) {
  if (error instanceof TritonError) return error;
  const payload = error && typeof error === 'object' ? error.payload : undefined;
  if (payload && typeof payload.code === 'string') {
    const code = CODES.indexOf(payload.code);
    return new TritonModelException(String(payload.message), code < 0 ? TritonError.INTERNAL : code);
  }
  return new TritonModelException(error instanceof Error ? error.message : String(error));
}

function hostCall(fn) {
  try {
    return fn();
  } catch (e) {
    throw fromHost(e);
  }
}

// ---- logging -----------------------------------------------------------------------------------

export const LogLevel = Object.freeze({ INFO: 0, WARNING: 1, ERROR: 2, VERBOSE: 3 });
const LEVELS = { 0: 'info', 1: 'warn', 2: 'error', 3: 'verbose' };

function format(args) {
  return args
    .map((a) => {
      if (typeof a === 'string') return a;
      if (a instanceof Error) return `${a.name}: ${a.message}`;
      try {
        return JSON.stringify(a, (_, v) => (typeof v === 'bigint' ? `${v}` : v));
      } catch {
        return String(a);
      }
    })
    .join(' ');
}

export const Logger = Object.freeze({
  log(message, level = LogLevel.INFO) {
    hostLog(LEVELS[level] ?? 'info', String(message));
  },
  logInfo(message) {
    hostLog('info', String(message));
  },
  logWarn(message) {
    hostLog('warn', String(message));
  },
  logError(message) {
    hostLog('error', String(message));
  },
  logVerbose(message) {
    hostLog('verbose', String(message));
  },
});

// The component has no stdout: console goes to the server's log.
globalThis.console = {
  log: (...a) => hostLog('info', format(a)),
  info: (...a) => hostLog('info', format(a)),
  debug: (...a) => hostLog('verbose', format(a)),
  trace: (...a) => hostLog('verbose', format(a)),
  warn: (...a) => hostLog('warn', format(a)),
  error: (...a) => hostLog('error', format(a)),
};

// ---- host handles of the current execute -------------------------------------------------------

// Every host resource the guest holds during one execute(), released when it returns (the
// generated bindings never release a handle once a method was called on it).
let held = [];

// `onRelease` runs when the resource is released (e.g. to forget a cached handle).
function hold(resource, onRelease) {
  held.push(resource);
  if (onRelease) held.push({ [Symbol.dispose]: onRelease });
  return resource;
}

function releaseAll() {
  const resources = held;
  held = [];
  for (const r of resources) {
    try {
      r[Symbol.dispose]();
    } catch {
      // already moved to the host
    }
  }
}

// Releases handles made for a response that then failed (they were never handed over).
function releaseNow(handles) {
  for (const h of handles) {
    try {
      h[Symbol.dispose]();
    } catch {
      // nothing to release
    }
  }
}

// ---- datatypes ---------------------------------------------------------------------------------

const Float16 = globalThis.Float16Array;

const TYPED = {
  BOOL: Uint8Array,
  UINT8: Uint8Array,
  UINT16: Uint16Array,
  UINT32: Uint32Array,
  UINT64: BigUint64Array,
  INT8: Int8Array,
  INT16: Int16Array,
  INT32: Int32Array,
  INT64: BigInt64Array,
  FP16: Float16 ?? Uint16Array,
  BF16: Uint16Array,
  FP32: Float32Array,
  FP64: Float64Array,
};

const FROM_ARRAY_TYPE = new Map([
  [Float32Array, 'FP32'],
  [Float64Array, 'FP64'],
  [Int8Array, 'INT8'],
  [Int16Array, 'INT16'],
  [Int32Array, 'INT32'],
  [BigInt64Array, 'INT64'],
  [Uint8Array, 'UINT8'],
  [Uint16Array, 'UINT16'],
  [Uint32Array, 'UINT32'],
  [BigUint64Array, 'UINT64'],
]);
if (Float16) FROM_ARRAY_TYPE.set(Float16, 'FP16');

const CANONICAL = new Set([...Object.keys(TYPED), 'BYTES']);
// The contract's spelling of each datatype (`data-type` enum cases).
const WIT_DATATYPE = Object.fromEntries([...CANONICAL].map((d) => [d, d.toLowerCase()]));

/** "FP32", "TYPE_FP32", "fp32", "float32" -> "FP32". */
export function normalizeDatatype(datatype) {
  if (datatype === undefined || datatype === null) return undefined;
  if (CANONICAL.has(datatype)) return datatype;
  let d = String(datatype).toUpperCase();
  if (d.startsWith('TYPE_')) d = d.slice(5);
  const aliases = { STRING: 'BYTES', FLOAT32: 'FP32', FLOAT64: 'FP64', FLOAT16: 'FP16', BFLOAT16: 'BF16' };
  d = aliases[d] ?? d;
  if (d !== 'BYTES' && !(d in TYPED)) throw new TritonModelException(`unknown datatype '${datatype}'`, TritonError.INVALID_ARG);
  return d;
}

/** Triton's config type name ("TYPE_FP32") -> the datatype name Tensor takes ("FP32"). */
export function tritonStringToDatatype(typeString) {
  return normalizeDatatype(typeString);
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function encodeBytesElements(items) {
  const parts = items.map((v) => (v instanceof Uint8Array ? v : encoder.encode(String(v))));
  const out = new Uint8Array(parts.reduce((n, p) => n + 4 + p.length, 0));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const p of parts) {
    view.setUint32(at, p.length, true);
    out.set(p, at + 4);
    at += 4 + p.length;
  }
  return out;
}

function decodeBytesElements(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = [];
  let at = 0;
  while (at + 4 <= bytes.length) {
    const n = view.getUint32(at, true);
    out.push(bytes.subarray(at + 4, at + 4 + n));
    at += 4 + n;
  }
  return out;
}

function toBf16Bits(values) {
  const f = Float32Array.from(values);
  const bits = new Uint32Array(f.buffer);
  return Uint16Array.from(bits, (b) => b >>> 16);
}

// Flat values (an array, or a typed array) -> the raw little-endian bytes of `datatype`. A typed
// array of the datatype's own type is viewed, not copied: element-wise conversion is slow in an
// interpreter without a JIT (~1 s for a million elements).
function encodeValues(values, datatype) {
  if (isTypedArray(values) && values.constructor === TYPED[datatype] && datatype !== 'BOOL') {
    return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  }
  if (datatype === 'BYTES') return encodeBytesElements(Array.from(values));
  if (datatype === 'BF16') return new Uint8Array(toBf16Bits(values).buffer);
  if (datatype === 'FP16' && !Float16) {
    throw new TritonModelException('FP16 from JavaScript numbers needs Float16Array; pass a Uint16Array of raw bits');
  }
  const Typed = TYPED[datatype];
  let array;
  if (Typed === BigInt64Array || Typed === BigUint64Array) {
    array = Typed.from(values, (v) => (typeof v === 'bigint' ? v : BigInt(Math.trunc(Number(v)))));
  } else if (datatype === 'BOOL') {
    array = Uint8Array.from(values, (v) => (v ? 1 : 0));
  } else {
    array = Typed.from(values, (v) => Number(v));
  }
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
}

function inferDatatype(values) {
  const first = values.find((v) => v !== undefined && v !== null);
  if (typeof first === 'string' || first instanceof Uint8Array) return 'BYTES';
  if (typeof first === 'boolean') return 'BOOL';
  if (typeof first === 'bigint') return 'INT64';
  return 'FP32';
}

// Nested arrays -> [flat values, shape].
function flatten(data) {
  const shape = [];
  let level = data;
  while (Array.isArray(level)) {
    shape.push(level.length);
    level = level[0];
  }
  const flat = shape.length > 1 ? data.flat(shape.length - 1) : data;
  return [flat, shape];
}

function isTypedArray(x) {
  return ArrayBuffer.isView(x) && !(x instanceof DataView);
}

function sameShape(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

// A shape as an array of numbers (kept as given when it already is one).
function shapeOf(shape) {
  if (Array.isArray(shape) && shape.every((d) => typeof d === 'number')) return shape;
  return Array.from(shape, Number);
}

// ---- tensors -----------------------------------------------------------------------------------

/**
 * A named tensor: new Tensor(name, data, datatype?, shape?), where data is a typed array (its
 * type gives the datatype), an array (nested arrays give the shape; numbers default to FP32,
 * strings or Uint8Arrays to BYTES, booleans to BOOL, bigints to INT64), or another Tensor (the
 * same data under `name`, no copy). A model output whose datatype was not given is converted to
 * the datatype its config declares.
 */
export class Tensor {
  constructor(name, data, datatype, shape) {
    // SpiderMonkey runs as an interpreter here (no JIT): every operation on this path counts.
    this._name = typeof name === 'string' ? name : String(name);
    this._handle = undefined; // a host tensor
    this._explicit = datatype !== undefined && datatype !== null;
    if (data instanceof Tensor) {
      this._source = data;
      this._datatype = normalizeDatatype(datatype) ?? data.datatype();
      this._shape = shape ? shapeOf(shape) : data.shape();
      return;
    }
    if (data instanceof Uint8Array && this._explicit && normalizeDatatype(datatype) === 'BYTES') {
      // One BYTES element holding these bytes (as a string would be).
      this._datatype = 'BYTES';
      this._values = [data];
      this._shape = shape ? shapeOf(shape) : [1];
      return;
    }
    if (isTypedArray(data)) {
      this._datatype = this._explicit ? normalizeDatatype(datatype) : (FROM_ARRAY_TYPE.get(data.constructor) ?? 'UINT8');
      this._values = data;
      this._shape = shape ? shapeOf(shape) : [data.length];
      return;
    }
    if (Array.isArray(data)) {
      const [flat, nested] = flatten(data);
      this._datatype = normalizeDatatype(datatype) ?? inferDatatype(flat);
      this._values = flat;
      this._shape = shape ? shapeOf(shape) : nested;
      return;
    }
    if (data === undefined && datatype === undefined) {
      throw new TritonModelException(`tensor '${name}' needs data`, TritonError.INVALID_ARG);
    }
    // A scalar: a rank-0 tensor.
    this._datatype = normalizeDatatype(datatype) ?? inferDatatype([data]);
    this._values = [data];
    this._shape = shape ? shapeOf(shape) : [];
  }

  /** A tensor that lives in the host (a request input, a BLS output). */
  // `datatype`, when known (a request input's, from the model config, which the server checked
  // the request against), saves a host call.
  static _fromHost(handle, name, datatype) {
    const t = Object.create(Tensor.prototype);
    t._handle = hold(handle);
    t._name = name ?? handle.name();
    t._explicit = true;
    if (datatype !== undefined) t._datatype = datatype;
    return t;
  }

  /** A tensor from raw little-endian bytes (BYTES: Triton's serialized elements). */
  static fromBytes(name, bytes, datatype, shape) {
    const raw = new Uint8Array(bytes);
    const d = normalizeDatatype(datatype);
    if (!shape) {
      // One dimension: the element count the bytes hold.
      shape = [d === 'BYTES' ? decodeBytesElements(raw).length : raw.length / TYPED[d].BYTES_PER_ELEMENT];
    }
    const t = new Tensor(name, raw, 'UINT8', shape);
    t._datatype = d;
    t._raw = raw;
    t._values = undefined;
    t._explicit = true;
    return t;
  }

  name() {
    return this._name;
  }

  datatype() {
    if (this._datatype === undefined) this._datatype = this._handle.datatype().toUpperCase();
    return this._datatype;
  }

  shape() {
    if (this._shape === undefined) this._shape = Array.from(this._handle.shape(), Number);
    return [...this._shape];
  }

  /** The raw little-endian bytes (a copy out of the host for a host tensor). */
  toBytes() {
    if (this._raw === undefined) {
      if (this._handle && (this._datatype === undefined || this._shape === undefined)) {
        // datatype, shape and bytes in one host call
        const read = this._handle.read();
        if (this._datatype === undefined) this._datatype = read.datatype.toUpperCase();
        if (this._shape === undefined) this._shape = Array.from(read.shape, Number);
        this._raw = read.data;
      } else if (this._handle) this._raw = this._handle.data();
      else if (this._source) this._raw = this._source.toBytes();
      else this._raw = encodeValues(this._values, this.datatype());
    }
    return this._raw;
  }

  /** The elements as a typed array of the datatype (BYTES: an array of Uint8Array). */
  asArray() {
    const datatype = this.datatype();
    if (this._values !== undefined && (isTypedArray(this._values) ? this._values.constructor === TYPED[datatype] : false)) {
      return this._values;
    }
    if (this._values !== undefined && datatype === 'BYTES') {
      return this._values.map((v) => (v instanceof Uint8Array ? v : encoder.encode(String(v))));
    }
    const bytes = this.toBytes();
    if (datatype === 'BYTES') return decodeBytesElements(bytes);
    const Typed = TYPED[datatype];
    const aligned = bytes.byteOffset % Typed.BYTES_PER_ELEMENT === 0 ? bytes : bytes.slice();
    return new Typed(aligned.buffer, aligned.byteOffset, aligned.byteLength / Typed.BYTES_PER_ELEMENT);
  }

  /** The elements as a plain array (BOOL: booleans; BYTES: Uint8Arrays). */
  asList() {
    const values = this.asArray();
    if (this.datatype() === 'BOOL') return Array.from(values, (v) => v !== 0);
    return Array.from(values);
  }

  /** A BYTES tensor's elements decoded as UTF-8 strings. */
  asStrings() {
    return this.asArray().map((b) => decoder.decode(b));
  }

  // A host handle with this tensor's name and data, for a response or a send (the host takes
  // it). `declared` is the config's datatype for this output, used when none was given.
  _lowerOwned(declared) {
    if (this._handle) {
      return this._handle.withName(this._name);
    }
    if (this._borrowable !== undefined) {
      return this._borrowable.withName(this._name); // already in the host (a BLS input)
    }
    const source = this._source;
    if (source && source._handle && source._values === undefined && source._raw === undefined
        && this.datatype() === source.datatype() && sameShape(this._shape, source.shape())) {
      return source._handle.withName(this._name); // the same bytes, renamed: no copy
    }
    let datatype = this.datatype();
    let bytes;
    if (!this._explicit && declared && declared !== datatype && this._values !== undefined) {
      datatype = declared;
      bytes = encodeValues(this._values, datatype);
    } else {
      bytes = this.toBytes();
    }
    const dims = this._shape ?? this.shape();
    const shape = new BigInt64Array(dims.length);
    for (let i = 0; i < dims.length; i++) shape[i] = BigInt(dims[i]);
    try {
      return HostTensor.create(this._name, WIT_DATATYPE[datatype], shape, bytes);
    } catch (e) {
      throw fromHost(e);
    }
  }

  // A host handle for a BLS call's input (borrowed; released with the execute).
  _lowerBorrowed() {
    if (this._handle) return this._name === this._handle.name() ? this._handle : this._renamed();
    if (this._borrowable === undefined) this._borrowable = hold(this._lowerOwned(), () => this._forget());
    return this._borrowable;
  }

  _renamed() {
    if (this._borrowable === undefined) this._borrowable = hold(this._handle.withName(this._name), () => this._forget());
    return this._borrowable;
  }

  // The host handle made for BLS is released with the execute: a tensor kept longer (a constant
  // input) makes a new one next time.
  _forget() {
    this._borrowable = undefined;
  }
}

// ---- responses and requests --------------------------------------------------------------------

/** new InferenceResponse({ outputTensors, error }) (or positional, as Triton's Python). */
export class InferenceResponse {
  constructor(outputTensors = [], error = undefined) {
    if (outputTensors && !Array.isArray(outputTensors) && typeof outputTensors === 'object') {
      error = outputTensors.error;
      outputTensors = outputTensors.outputTensors ?? [];
    }
    const outputs = Array.isArray(outputTensors) ? outputTensors.slice() : Array.from(outputTensors ?? []);
    for (let i = 0; i < outputs.length; i++) {
      if (!(outputs[i] instanceof Tensor)) throw new TypeError('InferenceResponse outputTensors must be Tensor objects');
    }
    this._outputs = outputs;
    if (error === undefined || error === null) this._error = undefined;
    else this._error = error instanceof TritonError ? error : new TritonError(String(error?.message ?? error));
  }

  outputTensors() {
    return [...this._outputs];
  }

  hasError() {
    return this._error !== undefined;
  }

  error() {
    return this._error;
  }
}

/** A decoupled request's response sender: send(response, flags). */
export class InferenceResponseSender {
  constructor(request) {
    this._request = request;
    this._sender = undefined;
    this._closed = false;
  }

  send(response = undefined, flags = 0) {
    if (this._closed) throw new TritonModelException('Unable to send response. Response sender has been closed.');
    const final = (flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL) !== 0;
    if (response === undefined && !final) throw new TritonModelException('send() needs a response or the FINAL flag');
    if (this._sender === undefined) this._sender = hold(this._request._host.sender());
    if (response === undefined) {
      hostCall(() => this._sender.send([], true));
    } else if (response.hasError()) {
      hostCall(() => this._sender.sendError(witError(response.error()), final));
    } else {
      const outputs = lowerOutputs(response._outputs);
      try {
        this._sender.send(outputs, final);
      } catch (e) {
        throw fromHost(e);
      }
    }
    if (final) this._closed = true;
  }

  /** Whether the request's caller has gone (a cancelled stream): sends then fail. */
  isCancelled() {
    if (this._sender === undefined) this._sender = hold(this._request._host.sender());
    return this._sender.isCancelled();
  }
}

function paramValue(v) {
  if (typeof v === 'boolean') return { tag: 'bool', val: v };
  if (typeof v === 'bigint') return { tag: 'int', val: v };
  if (typeof v === 'number' && Number.isInteger(v)) return { tag: 'int', val: BigInt(v) };
  if (typeof v === 'number') return { tag: 'double', val: v };
  return { tag: 'string', val: String(v) };
}

function toParameters(object) {
  return Object.entries(object ?? {}).map(([key, v]) => ({ key, value: paramValue(v) }));
}

function fromParameters(list) {
  const out = {};
  for (const { key, value } of list) {
    const v = value.val;
    out[key] = typeof v === 'bigint' && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }
  return out;
}

function responseOf(handles) {
  return new InferenceResponse({ outputTensors: handles.map((h) => Tensor._fromHost(h)) });
}

function errorResponse(e) {
  return new InferenceResponse({ error: fromHost(e) });
}

/**
 * A request: one handed to execute(), or a BLS request the model builds:
 * new InferenceRequest({ modelName, inputs, requestedOutputNames, modelVersion, parameters }).
 */
export class InferenceRequest {
  constructor({ modelName, inputs = [], requestedOutputNames = [], modelVersion = -1, parameters = {} } = {}) {
    this._host = undefined;
    this._modelName = modelName;
    this._inputs = Array.from(inputs);
    for (const t of this._inputs) {
      if (!(t instanceof Tensor)) throw new TypeError('InferenceRequest inputs must be Tensor objects');
    }
    this._requested = Array.from(requestedOutputNames);
    this._version = modelVersion;
    this._parameters = { ...parameters };
  }

  static _fromHost(handle) {
    const r = Object.create(InferenceRequest.prototype);
    r._host = hold(handle);
    r._modelName = model.name;
    r._version = model.version;
    r._byName = new Map();
    return r;
  }

  inputs() {
    if (this._inputs === undefined) this._inputs = this._host.inputs().map((h) => Tensor._fromHost(h));
    return [...this._inputs];
  }

  /** The input called `name`, or undefined. */
  input(name) {
    if (!this._host) return this.inputs().find((t) => t.name() === name);
    if (this._byName.has(name)) return this._byName.get(name);
    let t;
    if (this._inputs !== undefined) {
      t = this._inputs.find((i) => i.name() === name);
    } else {
      const h = this._host.input(name);
      t = h === undefined ? undefined : Tensor._fromHost(h, name, model.inputTypes.get(name));
    }
    this._byName.set(name, t);
    return t;
  }

  requestedOutputNames() {
    if (this._requested === undefined) this._requested = this._host.requestedOutputs();
    return [...this._requested];
  }

  requestId() {
    return this._host ? this._host.id() : '';
  }

  /** The request parameters as an object. */
  parameters() {
    if (this._parameters === undefined) this._parameters = fromParameters(this._host.parameters());
    return { ...this._parameters };
  }

  modelName() {
    return this._modelName;
  }

  modelVersion() {
    return this._version;
  }

  getResponseSender() {
    if (!this._host) throw new TritonModelException('a BLS request has no response sender');
    if (this._sender === undefined) this._sender = new InferenceResponseSender(this);
    return this._sender;
  }

  /** Whether the caller has gone (seen for a decoupled model's requests; false for others). */
  isCancelled() {
    return this._host ? this._host.isCancelled() : false;
  }

  _blsArgs() {
    if (!this._modelName) throw new TritonModelException('InferenceRequest needs a modelName', TritonError.INVALID_ARG);
    const version = this._version === undefined || this._version === null || Number(this._version) < 1 ? undefined : BigInt(this._version);
    return [this._modelName, version, this.inputs().map((t) => t._lowerBorrowed()), this.requestedOutputNames(), toParameters(this.parameters())];
  }

  /** Runs the request on a served model; errors come back in the response's error(). With
   * { decoupled: true }, an iterator over a decoupled model's responses. */
  exec({ decoupled = false } = {}) {
    if (decoupled) return this.streamExec();
    try {
      const args = this._blsArgs();
      return responseOf(hostInfer(...args));
    } catch (e) {
      return errorResponse(e);
    }
  }

  /** Starts the call now and returns a Promise of its InferenceResponse: calls started one
   * after another run concurrently on the host (`await Promise.all(...)`). */
  execAsync() {
    let pending;
    try {
      pending = hold(hostInferAsync(...this._blsArgs()));
    } catch (e) {
      return Promise.resolve(errorResponse(e));
    }
    return Promise.resolve().then(() => {
      try {
        return responseOf(pending.get());
      } catch (e) {
        return errorResponse(e);
      }
    });
  }

  /** BLS to a decoupled model: an iterator over every response it sends (an error comes as a
   * response whose hasError() is true). */
  *streamExec() {
    let stream;
    try {
      stream = hold(hostInferStream(...this._blsArgs()));
    } catch (e) {
      yield errorResponse(e);
      return;
    }
    for (;;) {
      const item = stream.next();
      if (item === undefined) return;
      if (item.tag === 'err') {
        yield new InferenceResponse({ error: fromHost({ payload: item.val }) });
      } else {
        yield responseOf(item.val);
      }
    }
  }
}

// ---- telemetry: the model's own metrics and spans ----------------------------------------------

const METRIC_KINDS = ['counter', 'gauge', 'histogram'];

/** One series of a MetricFamily (made by `family.Metric(labels, buckets)`). */
export class Metric {
  constructor(handle) {
    this._handle = handle;
  }

  /** Adds `value` (a counter by a value >= 0 only; a gauge by any). */
  increment(value) {
    hostCall(() => this._handle.increment(Number(value)));
  }

  /** Sets a gauge. */
  set(value) {
    hostCall(() => this._handle.set(Number(value)));
  }

  /** Adds an observation to a histogram. */
  observe(value) {
    hostCall(() => this._handle.observe(Number(value)));
  }

  /** A counter's or gauge's value. */
  value() {
    return hostCall(() => this._handle.value());
  }
}

/**
 * pb_utils.MetricFamily: new MetricFamily(name, description, MetricFamily.COUNTER | GAUGE | HISTOGRAM).
 * The host labels every series with the model's `model` and `version`. Keep families and metrics
 * on the model (they outlive executes; a series leaves /metrics when the instance ends).
 */
export class MetricFamily {
  static COUNTER = 0;
  static GAUGE = 1;
  static HISTOGRAM = 2;

  constructor(name, description, kind) {
    const witKind = METRIC_KINDS[kind];
    if (witKind === undefined) throw new TritonModelException('Unknown metric kind');
    this.kind = kind;
    this._handle = hostCall(() => HostMetricFamily.create(String(name), String(description), witKind));
  }

  /** The series with `labels` (an object of strings); `buckets` for a HISTOGRAM, and only for one. */
  Metric(labels = {}, buckets = undefined) {
    const pairs = Object.entries(labels ?? {}).map(([k, v]) => [String(k), String(v)]);
    const bounds = buckets === undefined || buckets === null ? undefined : Float64Array.from(buckets, Number);
    return new Metric(hostCall(() => this._handle.metric(pairs, bounds)));
  }

  metric(labels, buckets) {
    return this.Metric(labels, buckets);
  }
}

/**
 * A span of the model's own code in the trace of the request it executes (for a batch, its first
 * traced request): new Span(name, parent?). It records nothing when the request is not traced,
 * and ends at `end()` or, at the latest, when execute returns.
 */
export class Span {
  constructor(name, parent = undefined) {
    this._handle = hold(HostSpan.start(String(name), parent?._handle));
  }

  isRecording() {
    return this._handle.isRecording();
  }

  /** `value`: boolean, number, bigint or string. */
  setAttribute(key, value) {
    this._handle.setAttribute(String(key), paramValue(value));
  }

  addEvent(name, attributes = {}) {
    this._handle.addEvent(String(name), Object.entries(attributes ?? {}).map(([k, v]) => [String(k), paramValue(v)]));
  }

  end() {
    this._handle.end();
  }
}

// ---- helpers of triton_python_backend_utils ----------------------------------------------------

export function getInputTensorByName(request, name) {
  return request.input(name);
}

export function getOutputTensorByName(response, name) {
  return response.outputTensors().find((t) => t.name() === name);
}

export function getInputConfigByName(modelConfig, name) {
  return (modelConfig.input ?? []).find((i) => i.name === name);
}

export function getOutputConfigByName(modelConfig, name) {
  return (modelConfig.output ?? []).find((o) => o.name === name);
}

export function usingDecoupledModelTransactionPolicy(modelConfig) {
  return Boolean(modelConfig.model_transaction_policy?.decoupled);
}

// ---- serving the guest's exports ---------------------------------------------------------------

// What initialize() learned: the served model's name, version and output datatypes.
const model = { name: '', version: '', inputTypes: new Map(), outputTypes: new Map(), instance: undefined };

function errResult(error) {
  return { tag: 'err', val: witError(error) };
}

// Host handles for a response's outputs (the host takes them). If one fails, those made before
// it are released and the error is thrown.
function lowerOutputs(outputs) {
  const handles = [];
  try {
    for (const t of outputs) handles.push(t._lowerOwned(model.outputTypes.get(t.name())));
  } catch (e) {
    releaseNow(handles);
    throw fromHost(e);
  }
  return handles;
}

function lowerResponse(response) {
  if (!(response instanceof InferenceResponse)) {
    return errResult(new TritonError(`execute() must return InferenceResponse objects, got ${typeof response}`));
  }
  if (response.hasError()) return errResult(response.error());
  try {
    return { tag: 'ok', val: lowerOutputs(response._outputs) };
  } catch (e) {
    return errResult(e);
  }
}

function finish(responses, count) {
  try {
    if (responses === undefined || responses === null) return []; // decoupled
    const list = Array.from(responses);
    if (list.length === 0) return [];
    if (list.length !== count) {
      const e = new TritonError(`execute() returned ${list.length} responses for ${count} requests`);
      return Array.from({ length: count }, () => errResult(e));
    }
    return list.map(lowerResponse);
  } finally {
    releaseAll();
  }
}

function failAll(error, count) {
  releaseAll();
  return Array.from({ length: count }, () => errResult(error));
}

/**
 * The component's exports for a guest module: one that exports `class TritonPythonModel` (an
 * instance is made at initialize), or plain `initialize` / `execute` / `finalize` functions.
 * `tessera guest build` generates the entry module that calls this.
 */
export function serve(guest) {
  const Model = guest.TritonPythonModel;
  if (typeof Model !== 'function' && typeof guest.execute !== 'function') {
    throw new Error('the model module must export `class TritonPythonModel` or a function `execute`');
  }
  return {
    initialize(args) {
      const config = JSON.parse(args.modelConfig);
      model.name = args.modelName;
      model.version = args.modelVersion;
      model.inputTypes = new Map((config.input ?? []).map((i) => [i.name, normalizeDatatype(i.data_type)]));
      model.outputTypes = new Map((config.output ?? []).map((o) => [o.name, normalizeDatatype(o.data_type)]));
      // Triton's Python backend passes these keys.
      const tritonArgs = {
        model_config: args.modelConfig,
        model_name: args.modelName,
        model_version: args.modelVersion,
        model_repository: args.modelRepository,
        model_instance_kind: args.modelInstanceKind,
        model_instance_name: args.modelInstanceName,
        model_instance_device_id: args.modelInstanceDeviceId,
      };
      try {
        if (typeof Model === 'function') {
          model.instance = new Model();
          model.instance.initialize?.(tritonArgs);
        } else {
          guest.initialize?.(tritonArgs);
        }
      } catch (e) {
        // A thrown { code, message } is initialize's error result.
        throw witError(e);
      } finally {
        releaseAll();
      }
    },

    execute(requests) {
      const count = requests.length;
      let result;
      try {
        const wrapped = new Array(count);
        for (let i = 0; i < count; i++) wrapped[i] = InferenceRequest._fromHost(requests[i]);
        result = model.instance ? model.instance.execute(wrapped) : guest.execute(wrapped);
      } catch (e) {
        return failAll(e, count);
      }
      if (result && typeof result.then === 'function') {
        return result.then(
          (responses) => finish(responses, count),
          (e) => failAll(e, count),
        );
      }
      return finish(result, count);
    },

    finalize() {
      try {
        if (model.instance) model.instance.finalize?.();
        else guest.finalize?.();
      } catch (e) {
        Logger.logError(`finalize failed: ${witError(e).message}`);
      } finally {
        releaseAll();
      }
    },
  };
}
