//! Model files encrypted at rest ("sealed"): a `model.onnx`, `model.pt` or `model.wasm` whose
//! bytes are a JSON Web Encryption (RFC 7516) in compact serialization, decrypted in memory with
//! the operator's keys and handed to its backend from there.
//!
//! - Content encryption `enc` = `A256GCM`; key management `alg` = `A256KW` (a random content key
//!   wrapped with the operator's key, RFC 3394) or `dir` (the operator's key itself). That is
//!   what KServe's confidential model serving decrypts (`A256KW` + `A256GCM`, kserve#5382), so a
//!   file sealed for KServe serves here unchanged (renamed to the model's file name).
//! - `kid` in the protected header names the key; a file without one needs exactly one key.
//!   Keys are a JWK Set (RFC 7517, `{"keys": [{"kty": "oct", "kid": "...", "k": "..."}]}`, each
//!   `k` 32 bytes, base64url) from `--model-keys FILE` or `TESSERA_MODEL_KEYS`.
//! - A file is sealed when it starts with `eyJ` (a base64url JSON object): no ONNX protobuf,
//!   TorchScript zip or Wasm component does.
//! - The plaintext lives in memory that is wiped when dropped; nothing is written in plaintext:
//!   the Wasm backend compiles a sealed component without its disk caches.
//! - Errors name the file, the key id and what failed (no key with that id, the authentication
//!   tag did not match: a wrong key or a damaged file), never key material. A model whose file
//!   cannot be opened is UNAVAILABLE with that reason.

use std::path::Path;

use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit, generic_array::GenericArray};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use serde::Deserialize;
use zeroize::Zeroizing;

use crate::error::{CoreError, CoreResult};

/// A sealed file is at most this big (its plaintext is held in memory whole).
const MAX_SEALED_BYTES: u64 = 4 << 30;
const KEY_BYTES: usize = 32;
const IV_BYTES: usize = 12;
const TAG_BYTES: usize = 16;
/// RFC 3394's initial value.
const KW_IV: [u8; 8] = [0xA6; 8];

/// The operator's keys, by id.
#[derive(Default)]
pub struct ModelKeys {
    keys: Vec<(Option<String>, Zeroizing<[u8; KEY_BYTES]>)>,
}

impl std::fmt::Debug for ModelKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(kid, _)| kid.as_deref().unwrap_or("")).collect();
        f.debug_struct("ModelKeys").field("ids", &ids).finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    k: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JwkDoc {
    Set { keys: Vec<Jwk> },
    One(Jwk),
}

impl ModelKeys {
    /// The keys of a JWK Set (or a single JWK) in `text`; `what` names its source in errors.
    pub fn parse(text: &str, what: &str) -> Result<Self, String> {
        let doc: JwkDoc = serde_json::from_str(text)
            .map_err(|e| format!("{what}: not a JWK Set (line {}, column {})", e.line(), e.column()))?;
        let jwks = match doc {
            JwkDoc::Set { keys } => keys,
            JwkDoc::One(jwk) => vec![jwk],
        };
        let mut keys = Vec::new();
        for (i, jwk) in jwks.into_iter().enumerate() {
            let at = format!("{what}: key {}", i + 1);
            if jwk.kty != "oct" {
                return Err(format!("{at}: `kty` must be \"oct\" (a symmetric key)"));
            }
            let bytes =
                Zeroizing::new(jwk.k.and_then(|k| B64.decode(k.trim_end_matches('=')).ok()).unwrap_or_default());
            let key: [u8; KEY_BYTES] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| format!("{at}: `k` must be {KEY_BYTES} bytes, base64url (AES-256)"))?;
            if keys.iter().any(|(kid, _)| *kid == jwk.kid) {
                return Err(format!("{at}: its `kid` is given twice"));
            }
            keys.push((jwk.kid, Zeroizing::new(key)));
        }
        Ok(Self { keys })
    }

    /// The keys of `file` and of the environment variable's `env` value, together.
    pub fn load(file: Option<&Path>, env: Option<&str>) -> Result<Self, String> {
        let mut all = Self::default();
        if let Some(path) = file {
            let text = Zeroizing::new(
                std::fs::read_to_string(path).map_err(|e| format!("--model-keys {}: {}", path.display(), e.kind()))?,
            );
            all.keys.extend(Self::parse(&text, &format!("--model-keys {}", path.display()))?.keys);
        }
        if let Some(text) = env {
            all.keys.extend(Self::parse(text, "TESSERA_MODEL_KEYS")?.keys);
        }
        Ok(all)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key with id `kid`.
    pub fn key(&self, kid: &str) -> Option<&[u8; KEY_BYTES]> {
        self.find(Some(kid))
    }

    fn find(&self, kid: Option<&str>) -> Option<&[u8; KEY_BYTES]> {
        match kid {
            Some(kid) => self.keys.iter().find(|(k, _)| k.as_deref() == Some(kid)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
        .map(|(_, key)| &**key)
    }
}

/// Whether `head` (a file's first bytes) begins a sealed file.
pub fn is_sealed(head: &[u8]) -> bool {
    head.starts_with(b"eyJ")
}

/// Whether the file at `path` is sealed (an unreadable file is not: its backend says why).
pub fn file_is_sealed(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 3];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && is_sealed(&head)
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    enc: String,
    kid: Option<String>,
    zip: Option<String>,
}

/// The plaintext of the sealed file at `path`; errors are UNAVAILABLE and say why.
pub fn open_file(path: &Path, keys: &ModelKeys) -> CoreResult<Zeroizing<Vec<u8>>> {
    let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size > MAX_SEALED_BYTES {
        return Err(CoreError::unavailable(format!("sealed model file '{name}' is over {MAX_SEALED_BYTES} bytes")));
    }
    let text = std::fs::read(path)
        .map_err(|e| CoreError::unavailable(format!("failed to read sealed model file '{name}': {}", e.kind())))?;
    open(&text, keys).map_err(|e| CoreError::unavailable(format!("sealed model file '{name}': {e}")))
}

/// The plaintext of a JWE compact serialization.
pub fn open(jwe: &[u8], keys: &ModelKeys) -> Result<Zeroizing<Vec<u8>>, String> {
    let text = std::str::from_utf8(jwe).map_err(|_| "not a JWE compact serialization (not ASCII)")?.trim_end();
    let parts: Vec<&str> = text.split('.').collect();
    let [header_b64, wrapped_b64, iv_b64, ciphertext_b64, tag_b64] = parts[..] else {
        return Err("not a JWE compact serialization (five base64url parts, dot-separated)".into());
    };
    let decode = |part: &str, what: &str| B64.decode(part).map_err(|_| format!("its {what} is not base64url"));
    let header: Header = serde_json::from_slice(&decode(header_b64, "header")?)
        .map_err(|_| "its protected header is not a JWE header with `alg` and `enc`".to_string())?;
    if header.enc != "A256GCM" {
        return Err("its `enc` is not A256GCM, the only content encryption served".into());
    }
    if header.zip.is_some() {
        return Err("it is compressed (`zip`), which is not served".into());
    }
    let kid = header.kid.as_deref();
    // The key id comes from the file (an upload): named back only when it is a short plain name.
    let named = match kid {
        None => "with no key id".to_string(),
        Some(k) if k.len() <= 64 && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) => {
            format!("with key id '{k}'")
        }
        Some(_) => "with a key id that is not a plain name".to_string(),
    };
    let Some(key) = keys.find(kid) else {
        return Err(format!(
            "it is sealed {named}, and this server has no such key (--model-keys, TESSERA_MODEL_KEYS; {} loaded)",
            keys.keys.len()
        ));
    };
    let wrapped = decode(wrapped_b64, "encrypted key")?;
    let cek: Zeroizing<Vec<u8>> = match header.alg.as_str() {
        "dir" if wrapped.is_empty() => Zeroizing::new(key.to_vec()),
        "A256KW" => unwrap_key(key, &wrapped).ok_or(format!("its key could not be unwrapped {named}: a wrong key"))?,
        _ => return Err("its `alg` is not A256KW or dir, the only key management served".into()),
    };
    let iv: [u8; IV_BYTES] = decode(iv_b64, "iv")?.try_into().map_err(|_| "its iv is not 12 bytes")?;
    let tag = decode(tag_b64, "tag")?;
    if tag.len() != TAG_BYTES {
        return Err("its tag is not 16 bytes".into());
    }
    let mut data = Zeroizing::new(decode(ciphertext_b64, "ciphertext")?);
    data.extend_from_slice(&tag);
    let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &cek).map_err(|_| "a bad content key")?);
    let plain_len = aead
        .open_in_place(Nonce::assume_unique_for_key(iv), Aad::from(header_b64.as_bytes()), &mut data)
        .map_err(|_| format!("it does not decrypt {named}: a wrong key, or the file was changed"))?
        .len();
    data.truncate(plain_len);
    Ok(data)
}

/// Seals `plain` for key `kid`: a JWE compact serialization (`A256KW`, or `dir` when `direct`).
pub fn seal(plain: &[u8], kid: &str, key: &[u8; KEY_BYTES], direct: bool) -> Result<String, String> {
    use ring::rand::{SecureRandom, SystemRandom};
    let random = SystemRandom::new();
    let mut iv = [0u8; IV_BYTES];
    let mut cek = Zeroizing::new([0u8; KEY_BYTES]);
    random.fill(&mut iv).and_then(|()| random.fill(&mut *cek)).map_err(|_| "no randomness")?;
    let (alg, wrapped, cek) =
        if direct { ("dir", Vec::new(), Zeroizing::new(*key)) } else { ("A256KW", wrap_key(key, &*cek), cek) };
    let header = serde_json::json!({ "alg": alg, "enc": "A256GCM", "kid": kid }).to_string();
    let header_b64 = B64.encode(header);
    let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &*cek).map_err(|_| "a bad content key")?);
    let mut data = plain.to_vec();
    let tag = aead
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(iv), Aad::from(header_b64.as_bytes()), &mut data)
        .map_err(|_| "encryption failed")?;
    Ok([header_b64, B64.encode(wrapped), B64.encode(iv), B64.encode(&data), B64.encode(tag.as_ref())].join("."))
}

/// RFC 3394 key wrap with a 256-bit key-encryption key.
fn wrap_key(kek: &[u8; KEY_BYTES], plain: &[u8]) -> Vec<u8> {
    let cipher = aes::Aes256::new(GenericArray::from_slice(kek));
    let n = plain.len() / 8;
    let mut a = KW_IV;
    let mut r = plain.to_vec();
    for j in 0..6 {
        for i in 1..=n {
            let mut block = GenericArray::clone_from_slice(&[a.as_slice(), &r[(i - 1) * 8..i * 8]].concat());
            cipher.encrypt_block(&mut block);
            let t = ((n * j + i) as u64).to_be_bytes();
            for (k, byte) in a.iter_mut().enumerate() {
                *byte = block[k] ^ t[k];
            }
            r[(i - 1) * 8..i * 8].copy_from_slice(&block[8..]);
        }
    }
    [a.as_slice(), &r].concat()
}

/// RFC 3394 key unwrap; none when the integrity check fails (a wrong key).
fn unwrap_key(kek: &[u8; KEY_BYTES], wrapped: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    if !wrapped.len().is_multiple_of(8) || wrapped.len() < 24 {
        return None;
    }
    let cipher = aes::Aes256::new(GenericArray::from_slice(kek));
    let n = wrapped.len() / 8 - 1;
    let mut a: [u8; 8] = wrapped[..8].try_into().ok()?;
    let mut r = Zeroizing::new(wrapped[8..].to_vec());
    for j in (0..6).rev() {
        for i in (1..=n).rev() {
            let t = ((n * j + i) as u64).to_be_bytes();
            let mut block = GenericArray::from([0u8; 16]);
            for k in 0..8 {
                block[k] = a[k] ^ t[k];
            }
            block[8..].copy_from_slice(&r[(i - 1) * 8..i * 8]);
            cipher.decrypt_block(&mut block);
            a.copy_from_slice(&block[..8]);
            r[(i - 1) * 8..i * 8].copy_from_slice(&block[8..]);
        }
    }
    // Compared without an early exit.
    let differs = a.iter().zip(KW_IV).fold(0u8, |d, (x, y)| d | (x ^ y));
    (differs == 0).then_some(r)
}

#[cfg(test)]
#[path = "sealed_tests.rs"]
mod tests;
