//! A toy BERT-style tokenizer, to show pre-processing in a guest (it feeds the `text_scorer` ONNX
//! model in model-repos/quickstart, e.g. through an ensemble).
//!
//! Input `TEXT`: BYTES, shape `[batch, 1]` (batched config) or `[1]` / `[n]` (one string per
//! element). Outputs, each `[n, 16]` INT64 with `n` = number of strings:
//! `INPUT_IDS` and `ATTENTION_MASK`.
//!
//! The scheme, per string (deterministic, no state):
//! 1. Lowercase (Unicode `to_lowercase`); invalid UTF-8 is replaced with U+FFFD.
//! 2. Split into tokens: a maximal run of alphanumeric characters is one token; every other
//!    non-whitespace character (punctuation, symbols) is a token of its own; whitespace only
//!    separates. `"Hello, world!"` -> `hello` `,` `world` `!`.
//! 3. Map each token to an id: tokens in [`VOCAB`] (about thirty common words and punctuation
//!    marks, with bert-base-uncased-style ids) get their id; any other token is hashed with 32-bit
//!    FNV-1a over its UTF-8 bytes into `HASH_BASE + hash % HASH_BUCKETS` (20000..29999), so the
//!    same word always gets the same id.
//! 4. `[CLS]` (101) + the first 14 token ids + `[SEP]` (102), then `[PAD]` (0) up to 16.
//!    `ATTENTION_MASK` is 1 for `[CLS]`, the tokens and `[SEP]`, 0 for padding.

use tessera_guest::{Error, Request, Tensor, export_model};

const SEQ_LEN: usize = 16;
const CLS: i64 = 101;
const SEP: i64 = 102;
const PAD: i64 = 0;
const HASH_BASE: i64 = 20_000;
const HASH_BUCKETS: u32 = 10_000;

/// The fixed vocabulary: token -> id (ids in the style of bert-base-uncased; a toy table, not a
/// real vocabulary file).
const VOCAB: &[(&str, i64)] = &[
    ("!", 999),
    (",", 1010),
    ("-", 1011),
    (".", 1012),
    ("?", 1029),
    ("a", 1037),
    ("i", 1045),
    ("the", 1996),
    ("of", 1997),
    ("and", 1998),
    ("in", 1999),
    ("to", 2000),
    ("was", 2001),
    ("is", 2003),
    ("for", 2005),
    ("on", 2006),
    ("it", 2009),
    ("with", 2007),
    ("this", 2023),
    ("not", 2025),
    ("are", 2024),
    ("be", 2022),
    ("you", 2017),
    ("very", 2200),
    ("good", 2204),
    ("great", 2307),
    ("love", 2293),
    ("world", 2088),
    ("bad", 2919),
    ("movie", 3185),
    ("hello", 7592),
];

fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

fn token_id(token: &str) -> i64 {
    match VOCAB.iter().find(|(w, _)| *w == token) {
        Some(&(_, id)) => id,
        None => HASH_BASE + i64::from(fnv1a(token.as_bytes()) % HASH_BUCKETS),
    }
}

fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            tokens.push(std::mem::take(&mut word));
        }
        if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

/// Appends one row of ids and mask (16 each) for `text`.
fn encode(text: &str, ids: &mut Vec<i64>, mask: &mut Vec<i64>) {
    let start = ids.len();
    ids.push(CLS);
    ids.extend(tokenize(text).iter().take(SEQ_LEN - 2).map(|t| token_id(t)));
    ids.push(SEP);
    let used = ids.len() - start;
    mask.extend(std::iter::repeat_n(1, used));
    ids.resize(start + SEQ_LEN, PAD);
    mask.resize(start + SEQ_LEN, 0);
}

fn tokenize_texts(request: &Request) -> Result<Vec<Tensor>, Error> {
    let text = request.input("TEXT")?;
    let shape = text.shape();
    let valid_shape = matches!(shape.as_slice(), [_] | [_, 1]);
    if !valid_shape {
        return Err(Error::invalid_arg(format!(
            "TEXT must have shape [batch, 1] or [n], got {shape:?}"
        )));
    }
    let strings = text.as_byte_strings()?;
    let n = strings.len();
    let mut ids = Vec::with_capacity(n * SEQ_LEN);
    let mut mask = Vec::with_capacity(n * SEQ_LEN);
    for s in &strings {
        encode(&String::from_utf8_lossy(s), &mut ids, &mut mask);
    }
    let out_shape = [n as i64, SEQ_LEN as i64];
    let wanted = request.requested_outputs();
    let mut outputs = Vec::with_capacity(2);
    if wanted.iter().any(|o| o == "INPUT_IDS") {
        outputs.push(Tensor::from_i64("INPUT_IDS", &out_shape, &ids)?);
    }
    if wanted.iter().any(|o| o == "ATTENTION_MASK") {
        outputs.push(Tensor::from_i64("ATTENTION_MASK", &out_shape, &mask)?);
    }
    Ok(outputs)
}

export_model!(fn tokenize_texts);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_words_and_punctuation() {
        assert_eq!(tokenize("Hello, World!"), ["hello", ",", "world", "!"]);
        assert_eq!(tokenize("  a\tb  "), ["a", "b"]);
    }

    #[test]
    fn encodes_with_cls_sep_and_padding() {
        let (mut ids, mut mask) = (Vec::new(), Vec::new());
        encode("Hello world", &mut ids, &mut mask);
        assert_eq!(&ids[..4], &[101, 7592, 2088, 102]);
        assert_eq!(ids.len(), 16);
        assert_eq!(mask.iter().sum::<i64>(), 4);
    }

    #[test]
    fn truncates_to_sixteen_and_hashes_unknown_words() {
        let (mut ids, mut mask) = (Vec::new(), Vec::new());
        encode(&"zebra ".repeat(40), &mut ids, &mut mask);
        assert_eq!(ids.len(), 16);
        assert_eq!(ids[15], 102);
        assert!(mask.iter().all(|&m| m == 1));
        let z = token_id("zebra");
        assert!((20_000..30_000).contains(&z));
        assert_eq!(z, token_id("zebra"));
    }
}
