//! gRPC messages read within the bounds HTTP bodies have (see [`crate::limits`]), before tonic
//! buffers or decodes them: a tower layer in front of the services that reads each
//! length-prefixed message of a request body and
//! - refuses one longer than `--grpc-max-message-size` from its 5-byte prefix, before its bytes
//!   arrive (RESOURCE_EXHAUSTED, in gRPC core's words, as Triton answers);
//! - reserves the message's bytes in the server-wide [`RequestBudget`] before reading them
//!   (UNAVAILABLE when it has no room, as an HTTP request gets 503);
//! - inflates a gzip or deflate message itself, a chunk at a time, each chunk charged to the
//!   budget, stopping at the size limit (tonic would inflate a bomb up to the limit, 2 GiB by
//!   default, before looking), and hands tonic the plain message;
//! - for `ModelInfer` and `ModelStreamInfer`, scans the message's wire format (no decoding) for
//!   its counts of inputs, outputs and parameters ([`MAX_INPUTS`] and friends: INVALID_ARGUMENT
//!   past them) and for what decoding it will allocate beyond its own bytes (e.g. a vector entry
//!   per one-byte `bytes_contents` element), which is charged to the budget too.
//!
//! A unary call holds its reservation until its response body is done. A stream holds the
//! reservation of the message it read last: each message's budget is given back when the next
//! one arrives or the stream ends (a stream's requests are decoded one after the other).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::Status;

use super::connection::{CallInFlight, GrpcConnectInfo};
use tonic::body::Body;

use crate::limits::{
    Compression, InflateError, MAX_INPUTS, MAX_OUTPUTS, MAX_PARAMETERS, RequestBudget, Reservation, inflate,
};

/// The gRPC length prefix: a compressed flag and a big-endian u32 length.
const PREFIX: usize = 5;

/// The layer (`Server::builder().layer(...)`).
#[derive(Clone)]
pub struct MessageLimitsLayer {
    budget: RequestBudget,
    max_message_size: usize,
}

impl MessageLimitsLayer {
    pub fn new(budget: RequestBudget, max_message_size: usize) -> Self {
        Self { budget, max_message_size }
    }
}

impl<S> tower::Layer<S> for MessageLimitsLayer {
    type Service = MessageLimits<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MessageLimits { inner, limits: self.clone() }
    }
}

#[derive(Clone)]
pub struct MessageLimits<S> {
    inner: S,
    limits: MessageLimitsLayer,
}

type Held = Arc<Mutex<Reservation>>;

impl<S, ResBody> tower::Service<http::Request<Body>> for MessageLimits<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    ResBody::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        // The connection has carried a call: it is no longer a silent one (see `serve`).
        let info = parts.extensions.get::<GrpcConnectInfo>().or_else(|| {
            parts.extensions.get::<tonic::transport::server::TlsConnectInfo<GrpcConnectInfo>>().map(|t| t.get_ref())
        });
        // The call is in flight on its connection (no longer a silent one, not idle) until its
        // response is done.
        let call = info.map(|info| info.used.begin_call());
        let compression = match parts.headers.get("grpc-encoding").map(http::HeaderValue::as_bytes) {
            Some(b"gzip") => Some(Compression::Gzip),
            Some(b"deflate") => Some(Compression::Deflate),
            _ => None,
        };
        if compression.is_some() {
            // The messages reach tonic inflated.
            parts.headers.remove("grpc-encoding");
        }
        let path = parts.uri.path();
        let scan = path.ends_with("/ModelInfer") || path.ends_with("/ModelStreamInfer");
        let held: Held = Arc::default();
        let body = LimitedBody {
            inner: body,
            buffer: BytesMut::new(),
            state: State::Prefix,
            compression,
            scan,
            limits: self.limits.clone(),
            held: Arc::clone(&held),
            ended: false,
        };
        let response = self.inner.call(http::Request::from_parts(parts, Body::new(body)));
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Body::new(HoldingBody { inner: body, _held: held, _call: call })))
        })
    }
}

/// A response body that keeps its request's reservation, and its call counted on its
/// connection, until it is done.
struct HoldingBody<B> {
    inner: B,
    _held: Held,
    _call: Option<CallInFlight>,
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for HoldingBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

type Reserving = Pin<Box<dyn Future<Output = Result<Reservation, Status>> + Send>>;

enum State {
    /// Reading a message's 5-byte prefix.
    Prefix,
    /// Waiting for budget for a message of `len` bytes.
    Reserving {
        compressed: bool,
        len: usize,
        wait: Reserving,
    },
    /// Reading a message's `len` bytes (budget reserved).
    Message {
        compressed: bool,
        len: usize,
    },
    /// A message is ready to hand on: its prefix, then its bytes.
    Emit {
        prefix: Option<Bytes>,
        message: Option<Bytes>,
    },
    Failed,
}

struct LimitedBody {
    inner: Body,
    buffer: BytesMut,
    state: State,
    compression: Option<Compression>,
    scan: bool,
    limits: MessageLimitsLayer,
    held: Held,
    ended: bool,
}

impl LimitedBody {
    /// Budget moved into the request's shared reservation (replacing the previous message's).
    fn hold(&self, reservation: Reservation) {
        if let Ok(mut held) = self.held.lock() {
            *held = reservation;
        }
    }

    fn fail(&mut self, status: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.state = State::Failed;
        self.buffer = BytesMut::new();
        self.hold(Reservation::default());
        Poll::Ready(Some(Err(status)))
    }

    /// One complete message's bytes as tonic should see them: inflated, counted and charged.
    fn finish(&mut self, compressed: bool, message: Bytes) -> Result<Bytes, Status> {
        let limit = self.limits.max_message_size;
        let mut reservation = self.held.lock().map(|mut held| std::mem::take(&mut *held)).unwrap_or_default();
        let message = match (compressed, self.compression) {
            (true, Some(compression)) => {
                match inflate(message, compression, limit, &self.limits.budget, &mut reservation) {
                    Ok(plain) => Bytes::from(plain),
                    Err(InflateError::TooLarge) => {
                        return Err(Status::resource_exhausted(format!(
                            "Received message larger than max (over {limit} bytes once decompressed vs. {limit})"
                        )));
                    }
                    Err(InflateError::Budget(e)) => return Err(Status::unavailable(e.message)),
                    Err(InflateError::Corrupt(e)) => {
                        return Err(Status::internal(format!(
                            "failed to decompress the {} message: {e}",
                            compression.name()
                        )));
                    }
                }
            }
            // A compressed flag without an encoding tonic and we know: tonic answers it.
            _ => message,
        };
        if self.scan {
            let shape = scan_infer_request(&message).map_err(ScanError::status)?;
            self.limits
                .budget
                .grow(&mut reservation, shape.decoded_extra)
                .map_err(|e| Status::unavailable(e.message))?;
        }
        self.hold(reservation);
        Ok(message)
    }
}

impl HttpBody for LimitedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Failed => return Poll::Ready(None),
                State::Emit { prefix, message } => {
                    if let Some(prefix) = prefix.take() {
                        return Poll::Ready(Some(Ok(Frame::data(prefix))));
                    }
                    let message = message.take();
                    this.state = State::Prefix;
                    if let Some(message) = message.filter(|m| !m.is_empty()) {
                        return Poll::Ready(Some(Ok(Frame::data(message))));
                    }
                    continue;
                }
                State::Prefix if this.buffer.len() >= PREFIX => {
                    let compressed = this.buffer[0] != 0;
                    let len = usize::try_from(u32::from_be_bytes([
                        this.buffer[1],
                        this.buffer[2],
                        this.buffer[3],
                        this.buffer[4],
                    ]))
                    .unwrap_or(usize::MAX);
                    let limit = this.limits.max_message_size;
                    if len > limit {
                        // gRPC core's words, which are what Triton's clients see.
                        return this.fail(Status::resource_exhausted(format!(
                            "Received message larger than max ({len} vs. {limit})"
                        )));
                    }
                    this.buffer.advance(PREFIX);
                    // The previous message's budget goes back before this one waits for its own.
                    this.hold(Reservation::default());
                    let budget = this.limits.budget.clone();
                    let wait: Reserving = Box::pin(async move {
                        let mut reservation = Reservation::default();
                        budget.reserve(&mut reservation, len).await.map_err(|e| Status::unavailable(e.message))?;
                        Ok(reservation)
                    });
                    this.state = State::Reserving { compressed, len, wait };
                    continue;
                }
                State::Reserving { compressed, len, wait } => {
                    let (compressed, len) = (*compressed, *len);
                    match ready!(wait.as_mut().poll(cx)) {
                        Ok(reservation) => {
                            this.hold(reservation);
                            this.state = State::Message { compressed, len };
                            continue;
                        }
                        Err(status) => return this.fail(status),
                    }
                }
                State::Message { compressed, len } if this.buffer.len() >= *len => {
                    let (compressed, len) = (*compressed, *len);
                    let message = this.buffer.split_to(len).freeze();
                    match this.finish(compressed, message) {
                        Ok(message) => {
                            let mut prefix = [0u8; PREFIX];
                            // `finish` kept it within max_message_size, itself at most u32::MAX
                            // (checked against the 4-byte length above).
                            let n = u32::try_from(message.len()).unwrap_or(u32::MAX);
                            prefix[1..].copy_from_slice(&n.to_be_bytes());
                            this.state =
                                State::Emit { prefix: Some(Bytes::copy_from_slice(&prefix)), message: Some(message) };
                            continue;
                        }
                        Err(status) => return this.fail(status),
                    }
                }
                State::Prefix | State::Message { .. } => {
                    if this.ended {
                        if this.buffer.is_empty() && matches!(this.state, State::Prefix) {
                            return Poll::Ready(None);
                        }
                        return this.fail(Status::internal("the request ended inside a gRPC message"));
                    }
                    match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                        Some(Ok(frame)) => match frame.into_data() {
                            Ok(data) => this.buffer.extend_from_slice(&data),
                            // Trailers (rare in requests) go on as they are, after what was read.
                            Err(frame) => return Poll::Ready(Some(Ok(frame))),
                        },
                        Some(Err(status)) => return this.fail(status),
                        None => this.ended = true,
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Failed)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// What a `ModelInferRequest`'s wire bytes say about decoding it: its counts, and the bytes
/// decoding allocates beyond the message's own (vector and map entries; an overestimate).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct InferRequestShape {
    pub inputs: usize,
    pub outputs: usize,
    pub decoded_extra: usize,
}

/// Bytes a decoded map entry, input, output or `bytes` element costs besides its own bytes
/// (generous: struct sizes plus growth of the vectors and maps that hold them).
const PER_PARAMETER: usize = 128;
const PER_TENSOR: usize = 512;
const PER_BYTES_ELEMENT: usize = 64;

/// Why a scan refused a message.
#[derive(Debug, PartialEq, Eq)]
pub enum ScanError {
    /// Not protobuf: answered as a failed decode is (INTERNAL, as Triton's gRPC core does).
    Malformed,
    /// Past one of this server's bounds (INVALID_ARGUMENT).
    TooMany(String),
}

impl ScanError {
    fn status(self) -> Status {
        match self {
            Self::Malformed => {
                Status::internal("failed to decode Protobuf message: buffer underflow or invalid wire format")
            }
            Self::TooMany(message) => Status::invalid_argument(message),
        }
    }
}

/// Scans a `ModelInferRequest` (field numbers from grpc_service.proto) without decoding it.
pub fn scan_infer_request(message: &[u8]) -> Result<InferRequestShape, ScanError> {
    let mut shape = InferRequestShape::default();
    let mut parameters = 0usize;
    for field in Fields(message) {
        let field = field?;
        match (field.number, field.value) {
            (4, Value::Bytes(_)) => {
                parameters += 1;
                shape.decoded_extra += PER_PARAMETER;
            }
            (5, Value::Bytes(input)) => {
                shape.inputs += 1;
                shape.decoded_extra += PER_TENSOR + scan_tensor(input, 4, Some(3), Some(5))?;
            }
            (6, Value::Bytes(output)) => {
                shape.outputs += 1;
                shape.decoded_extra += PER_TENSOR + scan_tensor(output, 2, None, None)?;
            }
            (7, Value::Bytes(_)) => shape.decoded_extra += PER_BYTES_ELEMENT,
            _ => {}
        }
    }
    if shape.inputs > MAX_INPUTS {
        return Err(ScanError::TooMany(format!("the request has more than {MAX_INPUTS} inputs (this server's limit)")));
    }
    if shape.outputs > MAX_OUTPUTS {
        return Err(ScanError::TooMany(format!(
            "the request has more than {MAX_OUTPUTS} requested outputs (this server's limit)"
        )));
    }
    if parameters > MAX_PARAMETERS {
        return Err(ScanError::TooMany(format!(
            "the request has more than {MAX_PARAMETERS} parameters (this server's limit)"
        )));
    }
    Ok(shape)
}

/// Extra decoded bytes of one input or output tensor message: its parameters (field
/// `parameters_field`, bounded by [`MAX_PARAMETERS`]), its shape (packed or not) and its typed
/// contents.
fn scan_tensor(
    message: &[u8],
    parameters_field: u32,
    shape_field: Option<u32>,
    contents_field: Option<u32>,
) -> Result<usize, ScanError> {
    let mut extra = 0usize;
    let mut parameters = 0usize;
    for field in Fields(message) {
        let field = field?;
        if field.number == parameters_field {
            parameters += 1;
            extra += PER_PARAMETER;
        } else if Some(field.number) == shape_field {
            extra += repeated_scalar_bytes(&field.value, 8);
        } else if Some(field.number) == contents_field
            && let Value::Bytes(contents) = field.value
        {
            extra += scan_contents(contents)?;
        }
    }
    if parameters > MAX_PARAMETERS {
        return Err(ScanError::TooMany(format!(
            "a tensor of the request has more than {MAX_PARAMETERS} parameters (this server's limit)"
        )));
    }
    Ok(extra)
}

/// Decoded bytes of `InferTensorContents`: every repeated field's elements at their in-memory
/// size, twice over for vector growth.
fn scan_contents(message: &[u8]) -> Result<usize, ScanError> {
    let mut extra = 0usize;
    for field in Fields(message) {
        let field = field?;
        extra += match field.number {
            1 => repeated_scalar_bytes(&field.value, 1),
            2 | 4 | 6 => repeated_scalar_bytes(&field.value, 4),
            3 | 5 | 7 => repeated_scalar_bytes(&field.value, 8),
            8 => PER_BYTES_ELEMENT,
            _ => 0,
        };
    }
    Ok(extra)
}

/// In-memory bytes (twice over, for vector growth) of the elements one occurrence of a repeated
/// scalar field holds: a packed run counts its varints (or fixed-width values), a lone value one.
fn repeated_scalar_bytes(value: &Value<'_>, size: usize) -> usize {
    let elements = match value {
        // Varints end at bytes without the continuation bit; fixed-width values are shorter
        // than that count, so it bounds both.
        Value::Bytes(packed) => packed.iter().filter(|b| **b < 0x80).count(),
        Value::Scalar => 1,
    };
    elements.saturating_mul(size).saturating_mul(2)
}

/// Deepest nesting of groups a message may have (prost's recursion limit).
const MAX_GROUP_DEPTH: usize = 100;

/// A field's payload: length-delimited bytes, or any other wire type.
enum Value<'a> {
    Bytes(&'a [u8]),
    Scalar,
}

struct Field<'a> {
    number: u32,
    value: Value<'a>,
}

/// The fields of a protobuf message, in order, read from its wire format.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, ScanError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let result = self.read_field();
        if result.is_err() {
            self.0 = &[];
        }
        Some(result)
    }
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, ScanError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some((&byte, rest)) = self.0.split_first() else {
                return Err(ScanError::Malformed);
            };
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(ScanError::Malformed)
    }

    fn skip(&mut self, n: usize) -> Result<&'a [u8], ScanError> {
        if self.0.len() < n {
            return Err(ScanError::Malformed);
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn read_field(&mut self) -> Result<Field<'a>, ScanError> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| ScanError::Malformed)?;
        let value = match key & 7 {
            0 => {
                self.varint()?;
                Value::Scalar
            }
            1 => {
                self.skip(8)?;
                Value::Scalar
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| ScanError::Malformed)?;
                Value::Bytes(self.skip(len)?)
            }
            5 => {
                self.skip(4)?;
                Value::Scalar
            }
            3 => {
                self.skip_group(number)?;
                Value::Scalar
            }
            // An end-group without its start, or a wire type that does not exist.
            _ => return Err(ScanError::Malformed),
        };
        Ok(Field { number, value })
    }

    /// Skips a (deprecated, but valid) group up to its end-group key, as decoders skip unknown
    /// groups; nested at most [`MAX_GROUP_DEPTH`] deep, as prost's recursion limit bounds them.
    fn skip_group(&mut self, number: u32) -> Result<(), ScanError> {
        let mut open = vec![number];
        while let Some(&innermost) = open.last() {
            let key = self.varint()?;
            let inner = u32::try_from(key >> 3).map_err(|_| ScanError::Malformed)?;
            match key & 7 {
                0 => drop(self.varint()?),
                1 => drop(self.skip(8)?),
                2 => {
                    let len = usize::try_from(self.varint()?).map_err(|_| ScanError::Malformed)?;
                    self.skip(len)?;
                }
                5 => drop(self.skip(4)?),
                3 if open.len() < MAX_GROUP_DEPTH => open.push(inner),
                4 if inner == innermost => drop(open.pop()),
                _ => return Err(ScanError::Malformed),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::proto::inference as pb;

    fn input(name: &str) -> pb::model_infer_request::InferInputTensor {
        pb::model_infer_request::InferInputTensor {
            name: name.into(),
            datatype: "BYTES".into(),
            shape: vec![3],
            ..Default::default()
        }
    }

    #[test]
    fn counts_and_decoded_size_are_read_without_decoding() {
        let mut request = pb::ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input("a"), input("b")],
            ..Default::default()
        };
        request.inputs[0].contents =
            Some(pb::InferTensorContents { bytes_contents: vec![vec![1], vec![], vec![2]], ..Default::default() });
        request.raw_input_contents = vec![Bytes::from_static(b"xyz")];
        let shape = scan_infer_request(&request.encode_to_vec()).unwrap();
        assert_eq!((shape.inputs, shape.outputs), (2, 0));
        // Two tensors, two shapes of one element, three bytes elements, one raw entry.
        assert_eq!(shape.decoded_extra, 2 * PER_TENSOR + 2 * 16 + 3 * PER_BYTES_ELEMENT + PER_BYTES_ELEMENT);
    }

    #[test]
    fn too_many_inputs_or_parameters_are_refused_before_decoding() {
        let request = pb::ModelInferRequest {
            inputs: (0..=MAX_INPUTS).map(|i| input(&i.to_string())).collect(),
            ..Default::default()
        };
        let error = scan_infer_request(&request.encode_to_vec()).err().unwrap();
        assert!(matches!(&error, ScanError::TooMany(m) if m.contains("more than 4096 inputs")), "{error:?}");
        let mut one = input("x");
        one.parameters = (0..=MAX_PARAMETERS).map(|i| (i.to_string(), pb::InferParameter::default())).collect();
        let request = pb::ModelInferRequest { inputs: vec![one], ..Default::default() };
        let error = scan_infer_request(&request.encode_to_vec()).err().unwrap();
        assert!(matches!(&error, ScanError::TooMany(m) if m.contains("more than 1024 parameters")), "{error:?}");
    }

    #[test]
    fn a_packed_run_of_one_byte_varints_is_charged_at_its_decoded_size() {
        let mut one = input("x");
        one.contents = Some(pb::InferTensorContents { int64_contents: vec![0; 1000], ..Default::default() });
        let request = pb::ModelInferRequest { inputs: vec![one], ..Default::default() };
        let shape = scan_infer_request(&request.encode_to_vec()).unwrap();
        assert!(shape.decoded_extra >= 8 * 1000, "{shape:?}");
    }

    #[test]
    fn malformed_bytes_are_an_error_not_a_panic() {
        for bytes in [&[0x2a, 0x05, 1][..], &[0xff; 11][..], &[0x0b][..], &[0x2a][..]] {
            assert_eq!(scan_infer_request(bytes).err(), Some(ScanError::Malformed), "{bytes:?}");
        }
    }
}
