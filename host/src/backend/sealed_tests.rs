use super::*;

fn keys(json: &str) -> ModelKeys {
    ModelKeys::parse(json, "test").expect("keys")
}

const KEY_A: &str = r#"{"kty":"oct","kid":"a","k":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"}"#;

#[test]
fn key_wrap_matches_rfc_3394() {
    // RFC 3394 section 4.6: 256 bits of key data with a 256-bit KEK.
    let kek: [u8; 32] = std::array::from_fn(|i| i as u8);
    let data: Vec<u8> =
        [0x00112233445566778899AABBCCDDEEFFu128.to_be_bytes(), std::array::from_fn(|i| i as u8)].concat();
    let wrapped = wrap_key(&kek, &data);
    let expected = "28c9f404c4b810f4cbccb35cfb87f8263f5786e2d80ed326cbc7f0e71a99f43bfb988b9b7a02dd21";
    assert_eq!(wrapped.iter().map(|b| format!("{b:02x}")).collect::<String>(), expected);
    assert_eq!(unwrap_key(&kek, &wrapped).expect("unwrap").as_slice(), data.as_slice());
    let mut other = kek;
    other[0] ^= 1;
    assert!(unwrap_key(&other, &wrapped).is_none(), "a wrong key fails the integrity check");
}

#[test]
fn seals_and_opens_with_either_key_management_and_names_what_failed() {
    let set = keys(&format!(r#"{{"keys":[{KEY_A},{{"kty":"oct","kid":"b","k":"{}"}}]}}"#, B64.encode([7u8; 32])));
    let key_a: [u8; 32] = std::array::from_fn(|i| i as u8);
    for direct in [false, true] {
        let sealed = seal(b"model bytes", "a", &key_a, direct).expect("seal");
        assert!(is_sealed(sealed.as_bytes()));
        assert_eq!(open(sealed.as_bytes(), &set).expect("open").as_slice(), b"model bytes");
    }
    let odd = seal(b"x", "<script>", &key_a, false).expect("seal");
    assert!(open(odd.as_bytes(), &set).expect_err("no such key").contains("a key id that is not a plain name"));
    let for_c = seal(b"x", "c", &key_a, false).expect("seal");
    let e = open(for_c.as_bytes(), &set).expect_err("no key c");
    assert!(e.starts_with("it is sealed with key id 'c', and this server has no such key"), "{e}");
    let under_b = seal(b"x", "b", &key_a, false).expect("seal with a's key under b's id");
    assert!(open(under_b.as_bytes(), &set).expect_err("wrong key").contains("a wrong key"));
    let direct_b = seal(b"x", "b", &key_a, true).expect("seal");
    assert!(open(direct_b.as_bytes(), &set).expect_err("wrong key").contains("a wrong key, or the file was changed"));
    // One byte of ciphertext changed.
    let good = seal(b"model bytes", "a", &key_a, false).expect("seal");
    let mut parts: Vec<String> = good.split('.').map(String::from).collect();
    let mut ciphertext = B64.decode(&parts[3]).expect("b64");
    ciphertext[0] ^= 1;
    parts[3] = B64.encode(ciphertext);
    assert!(open(parts.join(".").as_bytes(), &set).expect_err("changed").contains("the file was changed"));
    for bad in ["eyJ", "a.b.c.d.e", "\u{ff}"] {
        assert!(open(bad.as_bytes(), &set).is_err(), "{bad}");
    }
}

#[test]
fn refuses_bad_key_sets_without_printing_key_material() {
    for (json, says) in [
        (r#"{"keys":[{"kty":"RSA","kid":"a"}]}"#, "`kty` must be \"oct\""),
        (r#"{"keys":[{"kty":"oct","kid":"a","k":"c2hvcnQ"}]}"#, "must be 32 bytes"),
        (&format!(r#"{{"keys":[{KEY_A},{KEY_A}]}}"#), "given twice"),
        ("not json AAECAwQF", "not a JWK Set"),
    ] {
        let e = ModelKeys::parse(json, "test").expect_err(json);
        assert!(e.contains(says), "{json}: {e}");
        assert!(!e.contains("AAECAwQF") && !e.contains("c2hvcnQ"), "{e}");
    }
    let one = keys(KEY_A);
    assert_eq!(format!("{one:?}"), r#"ModelKeys { ids: ["a"], .. }"#);
    let key_a: [u8; 32] = std::array::from_fn(|i| i as u8);
    // A file with no kid opens with the only key.
    let sealed = seal(b"m", "a", &key_a, true).expect("seal");
    let mut parts: Vec<&str> = sealed.split('.').collect();
    let header = B64.encode(r#"{"alg":"dir","enc":"A256GCM"}"#);
    parts[0] = &header;
    // (The header is authenticated data: changing it must fail the tag, not select another key.)
    assert!(open(parts.join(".").as_bytes(), &one).expect_err("header changed").contains("was changed"));
}
