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
//!   its counts of inputs, outputs and parameters (`crate::limits::MAX_INPUTS` and friends: INVALID_ARGUMENT
//!   past them) and for what decoding it will allocate beyond its own bytes (e.g. a vector entry
//!   per one-byte `bytes_contents` element), which is charged to the budget too.
//!
//! A unary call holds its reservation until its response body is done. A stream holds the
//! reservation of the message it read last: each message's budget is given back when the next
//! one arrives or the stream ends (a stream's requests are decoded one after the other).
//!
//! Large messages never sit in memory twice or beyond what is charged: a plain one of at least
//! [`LARGE_MESSAGE`] bytes is read into pages of its own, an inflated one is inflated into such
//! pages ([`Pages`]), and either is handed to tonic in frames that give their pages back to the
//! kernel as tonic copies them into its own buffer. So under any burst (of compression bombs, say)
//! the memory these messages hold is what the budget counts, and it is released when they are.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::Status;

use super::connection::GrpcConnectInfo;
use tonic::body::Body;

pub use super::scan::{ScanError, scan_infer_request};
use crate::limits::{Compression, HoldingBody, InflateError, Pages, RequestBudget, Reservation, inflate};

/// The gRPC length prefix: a compressed flag and a big-endian u32 length.
const PREFIX: usize = 5;

/// A plain message at least this long is read into [`Pages`] of its own.
const LARGE_MESSAGE: usize = 1 << 20;
/// A message is handed to tonic in frames of this size (see the module).
const FRAME: usize = 1 << 20;

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
        let info = GrpcConnectInfo::of(&parts.extensions);
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
            // The reservation, and the call counted on its connection, last until the body is done.
            Ok(response.map(|body| Body::new(HoldingBody::new(body, (held, call)))))
        })
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
    /// Reading a message's `len` bytes (budget reserved): into `pages` when it is large and sent
    /// plain, else into the buffer.
    Message {
        compressed: bool,
        len: usize,
        pages: Option<Pages>,
    },
    /// A message is ready to hand on: its prefix, then its bytes in frames.
    Emit {
        prefix: Option<Bytes>,
        frames: std::vec::IntoIter<Bytes>,
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

    fn take_held(&self) -> Reservation {
        self.held.lock().map(|mut held| std::mem::take(&mut *held)).unwrap_or_default()
    }

    fn fail(&mut self, status: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.state = State::Failed;
        self.buffer = BytesMut::new();
        self.hold(Reservation::default());
        Poll::Ready(Some(Err(status)))
    }

    /// One complete message read into the buffer, as tonic should see it: inflated, counted and
    /// charged; its length and its frames.
    fn finish(&mut self, compressed: bool, message: Bytes) -> Result<(usize, Vec<Bytes>), Status> {
        let limit = self.limits.max_message_size;
        let mut reservation = self.take_held();
        let (compressed, compression) = match (compressed, self.compression) {
            (true, Some(compression)) => (message, compression),
            // A compressed flag without an encoding tonic and we know: tonic answers it.
            _ => {
                self.admit(&message, reservation)?;
                return Ok((message.len(), if message.is_empty() { Vec::new() } else { vec![message] }));
            }
        };
        let plain = match inflate(compressed, compression, limit, &self.limits.budget, &mut reservation) {
            Ok(plain) => plain,
            Err(InflateError::TooLarge) => {
                return Err(Status::resource_exhausted(format!(
                    "Received message larger than max (over {limit} bytes once decompressed vs. {limit})"
                )));
            }
            Err(InflateError::Budget(e)) => return Err(Status::unavailable(e.message)),
            Err(InflateError::Corrupt(e)) => {
                return Err(Status::internal(format!("failed to decompress the {} message: {e}", compression.name())));
            }
        };
        self.admit(plain.as_slice(), reservation)?;
        Ok((plain.len(), plain.into_frames(FRAME)))
    }

    /// A large plain message read into its own pages: counted and charged; its length and frames.
    fn finish_pages(&mut self, pages: Pages) -> Result<(usize, Vec<Bytes>), Status> {
        let reservation = self.take_held();
        self.admit(pages.as_slice(), reservation)?;
        Ok((pages.len(), pages.into_frames(FRAME)))
    }

    /// Scans an infer message for its counts and charges what decoding it will allocate; the
    /// reservation goes back to the request's.
    fn admit(&self, message: &[u8], mut reservation: Reservation) -> Result<(), Status> {
        if self.scan {
            let shape = scan_infer_request(message).map_err(ScanError::status)?;
            self.limits
                .budget
                .grow(&mut reservation, shape.decoded_extra)
                .map_err(|e| Status::unavailable(e.message))?;
        }
        self.hold(reservation);
        Ok(())
    }

    /// What a complete message becomes: its prefix (plain now), then its frames.
    fn emit(&mut self, finished: Result<(usize, Vec<Bytes>), Status>) -> Option<Status> {
        match finished {
            Ok((len, frames)) => {
                let mut prefix = [0u8; PREFIX];
                // The message was kept within max_message_size, itself at most u32::MAX (checked
                // against the 4-byte length above).
                let n = u32::try_from(len).unwrap_or(u32::MAX);
                prefix[1..].copy_from_slice(&n.to_be_bytes());
                self.state = State::Emit { prefix: Some(Bytes::copy_from_slice(&prefix)), frames: frames.into_iter() };
                None
            }
            Err(status) => Some(status),
        }
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
                State::Emit { prefix, frames } => {
                    if let Some(prefix) = prefix.take() {
                        return Poll::Ready(Some(Ok(Frame::data(prefix))));
                    }
                    match frames.next() {
                        Some(frame) => return Poll::Ready(Some(Ok(Frame::data(frame)))),
                        None => this.state = State::Prefix,
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
                            let pages = if !compressed && len >= LARGE_MESSAGE {
                                match Pages::new(len) {
                                    Ok(mut pages) => {
                                        let here = pages.extend_from_slice(&this.buffer[..len.min(this.buffer.len())]);
                                        this.buffer.advance(here);
                                        Some(pages)
                                    }
                                    Err(e) => {
                                        return this.fail(Status::unavailable(format!(
                                            "no memory for a message of {len} bytes: {e}"
                                        )));
                                    }
                                }
                            } else {
                                None
                            };
                            this.state = State::Message { compressed, len, pages };
                            continue;
                        }
                        Err(status) => return this.fail(status),
                    }
                }
                State::Message { len, pages: Some(pages), .. } if pages.len() >= *len => {
                    let State::Message { pages: Some(pages), .. } = std::mem::replace(&mut this.state, State::Prefix)
                    else {
                        continue;
                    };
                    let finished = this.finish_pages(pages);
                    if let Some(status) = this.emit(finished) {
                        return this.fail(status);
                    }
                    continue;
                }
                State::Message { compressed, len, pages: None } if this.buffer.len() >= *len => {
                    let (compressed, len) = (*compressed, *len);
                    let message = this.buffer.split_to(len).freeze();
                    let finished = this.finish(compressed, message);
                    if let Some(status) = this.emit(finished) {
                        return this.fail(status);
                    }
                    continue;
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
                            Ok(data) => {
                                let taken = match &mut this.state {
                                    State::Message { len, pages: Some(pages), .. } => {
                                        let wanted = len.saturating_sub(pages.len()).min(data.len());
                                        pages.extend_from_slice(&data[..wanted])
                                    }
                                    _ => 0,
                                };
                                this.buffer.extend_from_slice(&data[taken..]);
                            }
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
