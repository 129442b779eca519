//! Request bodies read within two bounds: one request's size (`--http-max-input-size`, after
//! decompression) and the server's budget of request bytes in flight
//! (`--max-inflight-request-bytes`), so that many large or compressed requests at once are
//! refused instead of multiplying memory.
//!
//! A request reserves budget for the bytes it holds (the body as received plus what
//! decompression produces) as they arrive, and keeps the reservation until its response is
//! built. A request whose Content-Length is known waits briefly for its whole reservation
//! before reading anything; growth past that (chunked bodies, decompression) takes budget only
//! if it is free at once, so requests never wait on each other while holding budget.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{CoreError, CoreResult};

/// Budget is counted in KiB so a semaphore's `u32` acquisitions cover bodies up to 4 TiB.
const UNIT: usize = 1024;
/// How long a request with a known size waits for budget before it is refused.
const BUDGET_WAIT: Duration = Duration::from_secs(2);
/// Decompressed output is produced and charged this much at a time.
const INFLATE_CHUNK: usize = 256 * 1024;

pub const UNSUPPORTED_COMPRESSION: &str = "Unsupported compression type";

/// The server-wide budget of request bytes in flight.
#[derive(Clone)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
    bytes: usize,
}

impl BodyBudget {
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

    /// Waits (briefly) for `bytes` of budget.
    async fn reserve(&self, reservation: &mut Reservation, bytes: usize) -> CoreResult<()> {
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
    fn grow(&self, reservation: &mut Reservation, bytes: usize) -> CoreResult<()> {
        let permit =
            Arc::clone(&self.units).try_acquire_many_owned(Self::units(bytes)).map_err(|_| self.exhausted())?;
        reservation.add(permit);
        Ok(())
    }
}

/// Budget held by one request; given back when dropped.
#[derive(Default)]
pub struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    fn add(&mut self, permit: OwnedSemaphorePermit) {
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

fn too_large(limit: usize) -> CoreError {
    CoreError::invalid_arg(format!(
        "request body exceeds the maximum allowed size of {limit} bytes (--http-max-input-size)"
    ))
}

/// Reads the whole body, undoing Content-Encoding (gzip / deflate). Never holds more than
/// `limit` bytes of compressed or of decompressed data, and charges what it holds to `budget`.
pub async fn read(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    budget: &BodyBudget,
) -> CoreResult<(Bytes, Reservation)> {
    let encoding = headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase());
    let encoding = match encoding.as_deref() {
        None | Some("" | "identity") => None,
        Some(e @ ("gzip" | "deflate")) => Some(e.to_string()),
        // Triton's words; the answer's Accept-Encoding header lists what is supported.
        Some(_) => {
            return Err(CoreError::unsupported(UNSUPPORTED_COMPRESSION));
        }
    };
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    let mut reservation = Reservation::default();
    if let Some(n) = declared.filter(|&n| n > 0) {
        budget.reserve(&mut reservation, n).await?;
    }
    let mut raw = BytesMut::with_capacity(declared.unwrap_or(0));
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| CoreError::invalid_arg(format!("failed to read the request body: {e}")))?;
        if raw.len() + chunk.len() > limit {
            return Err(too_large(limit));
        }
        let held = reservation.bytes();
        if raw.len() + chunk.len() > held {
            budget.grow(&mut reservation, raw.len() + chunk.len() - held)?;
        }
        raw.extend_from_slice(&chunk);
    }
    let raw = raw.freeze();
    let Some(encoding) = encoding else { return Ok((raw, reservation)) };
    // Inflated a chunk at a time, each charged before it is produced, and refused the moment it
    // passes the limit: a small bomb costs at most `limit` (and its budget), never more. The
    // buffer starts at the size gzip's trailer announces (or a guess) and, if that was short,
    // grows once straight to the limit: pages never written cost no memory, whereas doubling
    // would leave a trail of freed copies behind.
    let hint = if encoding == "gzip" { gzip_size_hint(&raw) } else { None };
    if hint.is_some_and(|n| n > limit) {
        // The body says what it inflates to: refused without inflating it. (The trailer holds the
        // size modulo 2^32, so a body that lies is still caught by the streaming limit below.)
        return Err(too_large(limit));
    }
    let first = hint.unwrap_or(raw.len().saturating_mul(4)).saturating_add(1).clamp(INFLATE_CHUNK, limit + 1);
    let mut out: Vec<u8> = Vec::with_capacity(first);
    let mut decoder: Box<dyn Read + Send> = match encoding.as_str() {
        "gzip" => Box::new(flate2::read::GzDecoder::new(std::io::Cursor::new(raw))),
        _ => Box::new(flate2::read::ZlibDecoder::new(std::io::Cursor::new(raw))),
    };
    loop {
        if out.len() > limit {
            return Err(too_large(limit));
        }
        if out.len() == out.capacity() {
            out.reserve_exact(limit + 1 - out.len());
        }
        let room = (out.capacity() - out.len()).min(INFLATE_CHUNK);
        budget.grow(&mut reservation, room)?;
        let start = out.len();
        out.resize(start + room, 0);
        let read = match decoder.read(&mut out[start..]) {
            Ok(n) => n,
            Err(e) => {
                return Err(CoreError::invalid_arg(format!("failed to decompress the {encoding} request body: {e}")));
            }
        };
        out.truncate(start + read);
        if read == 0 {
            break;
        }
    }
    Ok((Bytes::from(out), reservation))
}

/// The uncompressed size a single-member gzip body announces in its last four bytes (modulo
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

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn headers(encoding: Option<&str>, length: Option<usize>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(e) = encoding {
            h.insert(header::CONTENT_ENCODING, e.parse().unwrap());
        }
        if let Some(n) = length {
            h.insert(header::CONTENT_LENGTH, n.into());
        }
        h
    }

    #[tokio::test]
    async fn a_bomb_is_refused_at_the_limit_and_gives_its_budget_back() {
        let budget = BodyBudget::new(8 << 20);
        let bomb = gzip(&vec![0u8; 16 << 20]);
        let error =
            read(&headers(Some("gzip"), Some(bomb.len())), Body::from(bomb), 1 << 20, &budget).await.err().unwrap();
        assert!(error.message.contains("maximum allowed size of 1048576"), "{}", error.message);
        assert_eq!(budget.units.available_permits(), (8 << 20) / UNIT);
    }

    #[tokio::test]
    async fn budget_is_held_until_the_reservation_drops() {
        let budget = BodyBudget::new(64 * 1024);
        let body = vec![7u8; 40 * 1024];
        let (data, held) =
            read(&headers(None, Some(body.len())), Body::from(body.clone()), 1 << 20, &budget).await.unwrap();
        assert_eq!(data.len(), body.len());
        assert_eq!(held.bytes(), 40 * 1024);
        // The second 40 KiB does not fit beside the first: refused (after the short wait).
        let error =
            read(&headers(None, Some(body.len())), Body::from(body.clone()), 1 << 20, &budget).await.err().unwrap();
        assert!(error.message.contains("--max-inflight-request-bytes"), "{}", error.message);
        drop(held);
        assert!(read(&headers(None, Some(body.len())), Body::from(body), 1 << 20, &budget).await.is_ok());
    }

    #[tokio::test]
    async fn compressed_bodies_round_trip() {
        let budget = BodyBudget::new(64 << 20);
        let text = b"{\"inputs\": []}".repeat(1000);
        let (data, _held) =
            read(&headers(Some("gzip"), None), Body::from(gzip(&text)), 1 << 20, &budget).await.unwrap();
        assert_eq!(&data[..], &text[..]);
        let error = read(&headers(Some("br"), None), Body::from("x"), 1 << 20, &budget).await.err().unwrap();
        assert!(error.message.starts_with(UNSUPPORTED_COMPRESSION));
    }
}
