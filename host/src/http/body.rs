//! Request bodies read within two bounds: one request's size (`--http-max-input-size`, after
//! decompression) and the server's budget of request bytes in flight
//! ([`RequestBudget`], `--max-inflight-request-bytes`).
//!
//! A request whose Content-Length is known waits briefly for its whole reservation before
//! reading anything; growth past that (chunked bodies, decompression) takes budget only if it is
//! free at once, so requests never wait on each other while holding budget.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;

use crate::error::{CoreError, CoreResult};
use crate::limits::{Compression, InflateError, RequestBudget, Reservation, inflate};

pub const UNSUPPORTED_COMPRESSION: &str = "Unsupported compression type";

/// Triton 2.7x's cap on a chunked body's non-empty chunks (`kMaxChunkedChunks`): past it the
/// request is refused and reading stops (the connection then closes, its rest unread).
pub const MAX_CHUNKS: usize = 1 << 16;

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
    budget: &RequestBudget,
) -> CoreResult<(Bytes, Reservation)> {
    let encoding = headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase());
    let compression = match encoding.as_deref() {
        None | Some("" | "identity") => None,
        Some("gzip") => Some(Compression::Gzip),
        Some("deflate") => Some(Compression::Deflate),
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
    // hyper hands a chunked body over one frame per chunk, or more for a large one: with no
    // Content-Length, frames are at least the chunks.
    let mut frames = 0usize;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| CoreError::invalid_arg(format!("failed to read the request body: {e}")))?;
        if declared.is_none() && !chunk.is_empty() {
            frames += 1;
            if frames > MAX_CHUNKS {
                return Err(CoreError::invalid_arg(format!(
                    "Chunked request body exceeds maximum of {MAX_CHUNKS} non-empty chunks. Send fewer or larger \
                     HTTP chunks."
                )));
            }
        }
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
    let Some(compression) = compression else { return Ok((raw, reservation)) };
    match inflate(raw, compression, limit, budget, &mut reservation) {
        Ok(out) => Ok((out.into_bytes(), reservation)),
        Err(InflateError::TooLarge) => Err(too_large(limit)),
        Err(InflateError::Budget(e)) => Err(e),
        Err(InflateError::Corrupt(e)) => {
            Err(CoreError::invalid_arg(format!("failed to decompress the {} request body: {e}", compression.name())))
        }
    }
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
        let budget = RequestBudget::new(8 << 20);
        let bomb = gzip(&vec![0u8; 16 << 20]);
        let error =
            read(&headers(Some("gzip"), Some(bomb.len())), Body::from(bomb), 1 << 20, &budget).await.err().unwrap();
        assert!(error.message.contains("maximum allowed size of 1048576"), "{}", error.message);
        assert_eq!(budget.available(), 8 << 20);
    }

    #[tokio::test]
    async fn budget_is_held_until_the_reservation_drops() {
        let budget = RequestBudget::new(64 * 1024);
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
        let budget = RequestBudget::new(64 << 20);
        let text = b"{\"inputs\": []}".repeat(1000);
        let (data, _held) =
            read(&headers(Some("gzip"), None), Body::from(gzip(&text)), 1 << 20, &budget).await.unwrap();
        assert_eq!(&data[..], &text[..]);
        let error = read(&headers(Some("br"), None), Body::from("x"), 1 << 20, &budget).await.err().unwrap();
        assert!(error.message.starts_with(UNSUPPORTED_COMPRESSION));
    }
}
