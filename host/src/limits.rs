//! Bounds on what one request may make the server hold, shared by both doors:
//! - [`RequestBudget`]: the server-wide budget of request bytes in flight
//!   (`--max-inflight-request-bytes`). A request reserves budget for the bytes it holds (as
//!   received, plus what decompression and decoding make of them) and keeps the [`Reservation`]
//!   until its response is built, so that many large or compressed requests at once are refused
//!   instead of multiplying memory.
//! - [`inflate`]: decompression a chunk at a time, each chunk charged before it is produced and
//!   refused the moment the output passes the request's size limit; large output goes to
//!   [`Pages`] of its own, which the kernel gets back the moment they are released, so what is
//!   resident stays what the budget counts.
//! - [`MAX_INPUTS`], [`MAX_OUTPUTS`], [`MAX_PARAMETERS`]: counts per request, checked while a
//!   request is parsed (HTTP JSON) or scanned before it is decoded (gRPC protobuf).

use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{CoreError, CoreResult};

#[path = "limits_pages.rs"]
mod pages;
pub use pages::Pages;

/// Most inputs one request may name. Triton sets no number; models with more inputs than this
/// are unheard of, and the bound stops a body of a million tiny `inputs` objects while it is
/// being parsed rather than after.
pub const MAX_INPUTS: usize = 4096;
/// Most requested outputs per request.
pub const MAX_OUTPUTS: usize = 4096;
/// Most parameters in one `parameters` object (request, input or output).
pub const MAX_PARAMETERS: usize = 1024;

/// Budget is counted in KiB so a semaphore's `u32` acquisitions cover requests up to 4 TiB.
const UNIT: usize = 1024;
/// How long a request with a known size waits for budget before it is refused.
const BUDGET_WAIT: Duration = Duration::from_secs(2);
/// Decompressed output is produced and charged this much at a time.
const INFLATE_CHUNK: usize = 256 * 1024;

/// The server-wide budget of request bytes in flight, shared by the HTTP and gRPC doors.
#[derive(Clone)]
pub struct RequestBudget {
    units: Arc<Semaphore>,
    bytes: usize,
}

impl RequestBudget {
    pub fn new(bytes: usize) -> Self {
        let units = bytes.div_ceil(UNIT).clamp(1, Semaphore::MAX_PERMITS);
        Self { units: Arc::new(Semaphore::new(units)), bytes }
    }

    fn exhausted(&self) -> CoreError {
        CoreError::unavailable(format!(
            "the server is holding its limit of request bytes in flight ({} bytes, --max-inflight-request-bytes); \
            retry later",
            self.bytes
        ))
    }

    fn units(bytes: usize) -> u32 {
        u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX)
    }

    /// Waits (briefly) for `bytes` of budget. Only a request that holds nothing yet may wait, so
    /// requests never wait on each other while holding budget.
    pub async fn reserve(&self, reservation: &mut Reservation, bytes: usize) -> CoreResult<()> {
        let wanted = Self::units(bytes);
        let acquired = tokio::time::timeout(BUDGET_WAIT, Arc::clone(&self.units).acquire_many_owned(wanted)).await;
        match acquired {
            Ok(Ok(permit)) => {
                reservation.add(permit);
                Ok(())
            }
            _ => Err(self.exhausted()),
        }
    }

    /// Takes `bytes` more of budget only if it is free now.
    pub fn grow(&self, reservation: &mut Reservation, bytes: usize) -> CoreResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        let permit =
            Arc::clone(&self.units).try_acquire_many_owned(Self::units(bytes)).map_err(|_| self.exhausted())?;
        reservation.add(permit);
        Ok(())
    }

    /// Budget free now, in bytes.
    #[cfg(test)]
    pub fn available(&self) -> usize {
        self.units.available_permits() * UNIT
    }
}

/// Budget held by one request; given back when dropped.
#[derive(Default)]
pub struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    pub fn add(&mut self, permit: OwnedSemaphorePermit) {
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
    }

    /// Bytes reserved (rounded up to KiB).
    pub fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits() * UNIT)
    }
}

/// A response body that keeps what its request holds (a budget [`Reservation`], its count on its
/// connection) until the body is done or dropped: both doors wrap their responses in one.
pub struct HoldingBody<B, T> {
    inner: B,
    _held: T,
}

impl<B, T> HoldingBody<B, T> {
    pub fn new(inner: B, held: T) -> Self {
        Self { inner, _held: held }
    }
}

impl<B: http_body::Body<Data = Bytes> + Unpin, T: Unpin> http_body::Body for HoldingBody<B, T> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A compression a request may arrive in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    /// zlib-wrapped deflate, as both HTTP's `deflate` and gRPC's `deflate` are.
    Deflate,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Self::Gzip => "gzip",
            Self::Deflate => "deflate",
        }
    }
}

/// Why [`inflate`] stopped.
#[derive(Debug)]
pub enum InflateError {
    /// The output would pass `limit` bytes.
    TooLarge,
    /// The budget had no room for the next chunk.
    Budget(CoreError),
    /// The data is not valid in its compression.
    Corrupt(std::io::Error),
}

/// Inflated bytes: a small output in an ordinary vector, a large one in [`Pages`] of its own.
pub enum Inflated {
    Small(Vec<u8>),
    Large(Pages),
}

impl Inflated {
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Self::Small(bytes) => bytes,
            Self::Large(pages) => pages.as_slice(),
        }
    }

    /// The bytes, no copy.
    pub fn into_bytes(self) -> bytes::Bytes {
        match self {
            Self::Small(bytes) => bytes::Bytes::from(bytes),
            Self::Large(pages) => pages.into_bytes(),
        }
    }

    /// The bytes in frames of about `chunk` bytes, no copy; a large output's frames each give
    /// their memory back as soon as they are dropped ([`Pages::into_frames`]).
    pub fn into_frames(self, chunk: usize) -> Vec<bytes::Bytes> {
        match self {
            Self::Small(bytes) if bytes.is_empty() => Vec::new(),
            Self::Small(bytes) => vec![bytes::Bytes::from(bytes)],
            Self::Large(pages) => pages.into_frames(chunk),
        }
    }
}

/// Output up to this size is inflated into an ordinary vector; past it, into [`Pages`].
const SMALL_OUTPUT: usize = INFLATE_CHUNK;

/// Inflates `raw`, charging `budget` for each chunk before producing it and stopping the moment
/// the output passes `limit`: a small bomb costs at most `limit` (and its budget), never more.
/// Large output goes to pages mapped for it alone, at first as many as gzip's trailer announces
/// (or a guess), then, if that was short, straight up to the limit (the mapping grows in place or
/// moves without a copy): pages never written cost no memory, and every page goes back to the
/// kernel when the output is released, whichever thread then takes the next request's.
pub fn inflate(
    raw: bytes::Bytes,
    compression: Compression,
    limit: usize,
    budget: &RequestBudget,
    reservation: &mut Reservation,
) -> Result<Inflated, InflateError> {
    let hint = if compression == Compression::Gzip { gzip_size_hint(&raw) } else { None };
    if hint.is_some_and(|n| n > limit) {
        // The data says what it inflates to: refused without inflating it. (The trailer holds the
        // size modulo 2^32, so data that lies is still caught by the streaming limit below.)
        return Err(InflateError::TooLarge);
    }
    let expected = hint.unwrap_or(raw.len().saturating_mul(4)).saturating_add(1).min(limit + 1);
    let mut decoder: Box<dyn Read + Send> = match compression {
        Compression::Gzip => Box::new(flate2::read::GzDecoder::new(std::io::Cursor::new(raw))),
        Compression::Deflate => Box::new(flate2::read::ZlibDecoder::new(std::io::Cursor::new(raw))),
    };
    let mut small: Vec<u8> = Vec::with_capacity(expected.min(SMALL_OUTPUT));
    if expected <= SMALL_OUTPUT {
        loop {
            if small.len() > limit {
                return Err(InflateError::TooLarge);
            }
            if small.len() == small.capacity() {
                if small.len() >= SMALL_OUTPUT.min(limit + 1) {
                    break;
                }
                small.reserve_exact(SMALL_OUTPUT.min(limit + 1) - small.len());
            }
            let room = (small.capacity() - small.len()).min(INFLATE_CHUNK);
            budget.grow(reservation, room).map_err(InflateError::Budget)?;
            let start = small.len();
            small.resize(start + room, 0);
            let read = decoder.read(&mut small[start..]).map_err(InflateError::Corrupt)?;
            small.truncate(start + read);
            if read == 0 {
                return Ok(Inflated::Small(small));
            }
        }
    }
    let mapped = |e: std::io::Error| {
        InflateError::Budget(CoreError::unavailable(format!("no memory for the decompressed request: {e}")))
    };
    let mut out = Pages::new(expected.max(small.len() + INFLATE_CHUNK).min(limit + 1)).map_err(mapped)?;
    out.extend_from_slice(&small);
    drop(small);
    loop {
        if out.len() > limit {
            return Err(InflateError::TooLarge);
        }
        if out.len() == out.capacity() {
            out.grow(limit + 1).map_err(mapped)?;
        }
        let room = (out.capacity() - out.len()).min(INFLATE_CHUNK);
        budget.grow(reservation, room).map_err(InflateError::Budget)?;
        let read = decoder.read(&mut out.spare()[..room]).map_err(InflateError::Corrupt)?;
        out.advance(read);
        if read == 0 {
            return Ok(Inflated::Large(out));
        }
    }
}

/// The uncompressed size a single-member gzip stream announces in its last four bytes (modulo
/// 2^32; only a hint, since a client may lie).
fn gzip_size_hint(raw: &[u8]) -> Option<usize> {
    // Not gzip at all (no magic number): no hint; the decoder says what is wrong.
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return None;
    }
    let tail: [u8; 4] = raw.get(raw.len().checked_sub(4)?..)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(tail)).ok()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn compress(data: &[u8], compression: Compression) -> bytes::Bytes {
        let level = flate2::Compression::best();
        let out = match compression {
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Compression::Deflate => {
                let mut e = flate2::write::ZlibEncoder::new(Vec::new(), level);
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
        };
        bytes::Bytes::from(out)
    }

    #[test]
    fn a_bomb_stops_at_the_limit_and_its_budget_is_given_back_with_the_reservation() {
        let budget = RequestBudget::new(8 << 20);
        for compression in [Compression::Gzip, Compression::Deflate] {
            let bomb = compress(&vec![0u8; 16 << 20], compression);
            let mut reservation = Reservation::default();
            let result = inflate(bomb, compression, 1 << 20, &budget, &mut reservation);
            assert!(matches!(result, Err(InflateError::TooLarge)), "{compression:?}");
            // Never more than the limit (plus one chunk) was charged.
            assert!(reservation.bytes() <= (1 << 20) + INFLATE_CHUNK, "{}", reservation.bytes());
            drop(reservation);
            assert_eq!(budget.available(), 8 << 20);
        }
    }

    #[test]
    fn inflation_needs_budget_for_what_it_produces() {
        let budget = RequestBudget::new(512 * 1024);
        let data = compress(&vec![1u8; 2 << 20], Compression::Deflate);
        let mut reservation = Reservation::default();
        let result = inflate(data.clone(), Compression::Deflate, 4 << 20, &budget, &mut reservation);
        assert!(matches!(result, Err(InflateError::Budget(_))));
        let roomy = RequestBudget::new(8 << 20);
        let mut reservation = Reservation::default();
        let out = inflate(data, Compression::Deflate, 4 << 20, &roomy, &mut reservation).ok().unwrap();
        assert!(matches!(out, Inflated::Large(_)), "2 MiB of output is large");
        assert_eq!(out.as_slice(), &vec![1u8; 2 << 20][..]);
        let small = compress(b"{\"inputs\": []}", Compression::Gzip);
        let out = inflate(small, Compression::Gzip, 4 << 20, &roomy, &mut reservation).ok().unwrap();
        assert!(matches!(&out, Inflated::Small(v) if v == b"{\"inputs\": []}"));
    }

    #[tokio::test]
    async fn a_reservation_waits_briefly_then_is_refused() {
        let budget = RequestBudget::new(64 * 1024);
        let mut held = Reservation::default();
        budget.reserve(&mut held, 40 * 1024).await.unwrap();
        assert_eq!(held.bytes(), 40 * 1024);
        let mut second = Reservation::default();
        let error = budget.reserve(&mut second, 40 * 1024).await.err().unwrap();
        assert!(error.message.contains("--max-inflight-request-bytes"), "{}", error.message);
        drop(held);
        assert!(budget.reserve(&mut second, 40 * 1024).await.is_ok());
    }
}
