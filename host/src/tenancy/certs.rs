//! The names of a verified client certificate that the tenants file can match: the subject's
//! common names and the DNS and URI subject alternative names. The TLS layer (rustls) has already
//! checked the chain against the door's root certificates; this only reads names.

/// Names read from one client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertNames {
    pub common_names: Vec<String>,
    pub alt_names: Vec<String>,
}

impl CertNames {
    /// The names of a DER certificate (`None` when it does not parse: no identity from it).
    pub fn of_der(der: &[u8]) -> Option<Self> {
        let der = rustls_pki_types_der(der);
        let cert = webpki::EndEntityCert::try_from(&der).ok()?;
        let alt_names = cert.valid_dns_names().chain(cert.valid_uri_names()).map(str::to_owned).collect();
        Some(Self { common_names: common_names(cert.subject()), alt_names })
    }
}

fn rustls_pki_types_der(der: &[u8]) -> tokio_rustls::rustls::pki_types::CertificateDer<'_> {
    tokio_rustls::rustls::pki_types::CertificateDer::from(der)
}

/// The common names (OID 2.5.4.3) in a DER Name's contents (the RDN sets, without the outer
/// SEQUENCE), as UTF-8, PrintableString or IA5String values.
fn common_names(mut name: &[u8]) -> Vec<String> {
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    let mut out = Vec::new();
    while let Some((0x31, set, rest)) = tlv(name) {
        name = rest;
        let mut attrs = set;
        while let Some((0x30, attr, rest)) = tlv(attrs) {
            attrs = rest;
            if let Some((0x06, oid, value)) = tlv(attr)
                && oid == CN
                && let Some((0x0c | 0x13 | 0x16, text, _)) = tlv(value)
                && let Ok(text) = std::str::from_utf8(text)
            {
                out.push(text.to_string());
            }
        }
    }
    out
}

/// One DER tag-length-value: (tag, contents, what follows). Short and long lengths up to 4 bytes.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes.iter().fold(0usize, |n, b| (n << 8) | usize::from(*b))
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_names_are_read_from_a_subject() {
        // SET { SEQ { OID 2.5.4.10, UTF8 "org" } }, SET { SEQ { OID 2.5.4.3, UTF8 "client-a" } }
        let mut subject = vec![0x31, 0x0c, 0x30, 0x0a, 0x06, 0x03, 0x55, 0x04, 0x0a, 0x0c, 0x03];
        subject.extend(b"org");
        subject.extend([0x31, 0x11, 0x30, 0x0f, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x08]);
        subject.extend(b"client-a");
        assert_eq!(common_names(&subject), vec!["client-a".to_string()]);
        // Truncated input reads what it can and stops.
        assert_eq!(common_names(&subject[..subject.len() - 3]), Vec::<String>::new());
        assert!(CertNames::of_der(b"not a certificate").is_none());
    }
}
