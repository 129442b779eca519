//! The tenants file (`--tenants FILE`, TOML; docs/tenants.md is its reference): parsed and checked
//! whole, so that a file with a mistake is refused rather than half applied. The file holds key
//! hashes, never keys.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde::Deserialize;

/// Largest tenants file read: far above any real one, small enough to parse at every change.
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// Most tenants, and most keys and certificate names in all.
const MAX_TENANTS: usize = 10_000;
const MAX_IDENTITIES: usize = 100_000;

/// What a tenant may do besides calling its models: each names a group of the APIs
/// (`crate::restricted::ApiCategory`); docs/tenants.md has the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Inference (v2, generate, `/v1`), model metadata, configuration and readiness.
    Infer,
    /// The repository index, load and unload.
    Repository,
    /// Loading with `file:` overrides (model files sent in the request); needs `repository` too.
    RepositoryFiles,
    SharedMemory,
    Statistics,
    Trace,
    Logging,
    /// `/metrics`, when the file does not leave it open.
    Metrics,
}

/// APIs callable without an identity (`open = [...]`; default: health and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpenApi {
    Health,
    Metrics,
    Metadata,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default = "default_open")]
    open: Vec<OpenApi>,
    #[serde(default)]
    tenant: Vec<TenantDoc>,
}

fn default_open() -> Vec<OpenApi> {
    vec![OpenApi::Health, OpenApi::Metrics]
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantDoc {
    name: String,
    #[serde(default = "one")]
    weight: u32,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default = "default_roles")]
    roles: Vec<Role>,
    rate: Option<f64>,
    burst: Option<u32>,
    max_in_flight: Option<u32>,
    #[serde(default)]
    keys: Vec<KeyDoc>,
    #[serde(default)]
    certificates: Vec<CertDoc>,
}

fn one() -> u32 {
    1
}

fn default_roles() -> Vec<Role> {
    vec![Role::Infer]
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyDoc {
    id: String,
    sha256: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CertDoc {
    /// The subject's common name.
    cn: Option<String>,
    /// A DNS or URI subject alternative name.
    san: Option<String>,
}

/// One tenant as the file gives it, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantSpec {
    pub name: String,
    pub weight: u32,
    pub models: Vec<String>,
    pub roles: BTreeSet<Role>,
    /// Requests per second and burst.
    pub rate: Option<(f64, u32)>,
    pub max_in_flight: Option<u32>,
}

/// How a tenant is recognised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Credential {
    /// SHA-256 of an API key.
    Key([u8; 32]),
    CommonName(String),
    AltName(String),
}

/// The whole file, checked: tenants, and which tenant (by index) each credential names, with the
/// id a key is logged by.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantsFile {
    pub open: BTreeSet<OpenApi>,
    pub tenants: Vec<TenantSpec>,
    pub credentials: HashMap<Credential, (usize, String)>,
}

/// Reads and checks the tenants file; the error says what is wrong and where.
pub fn read(path: &Path) -> Result<TenantsFile, String> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read the tenants file {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the tenants file {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("the tenants file {} is larger than {MAX_FILE_BYTES} bytes", path.display()));
    }
    parse(&text).map_err(|e| format!("tenants file {}: {e}", path.display()))
}

/// Parses and checks the text of a tenants file.
pub fn parse(text: &str) -> Result<TenantsFile, String> {
    let doc: FileDoc = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
    if doc.tenant.len() > MAX_TENANTS {
        return Err(format!("more than {MAX_TENANTS} tenants"));
    }
    let mut tenants = Vec::with_capacity(doc.tenant.len());
    let mut credentials: HashMap<Credential, (usize, String)> = HashMap::new();
    let mut names = BTreeSet::new();
    for (index, t) in doc.tenant.into_iter().enumerate() {
        check_name("tenant name", &t.name)?;
        let who = format!("tenant '{}'", t.name);
        if !names.insert(t.name.clone()) {
            return Err(format!("{who} is listed twice"));
        }
        if t.weight == 0 || t.weight > 1000 {
            return Err(format!("{who}: weight must be 1 to 1000, got {}", t.weight));
        }
        for pattern in &t.models {
            if pattern.is_empty() || pattern.len() > 256 || pattern.chars().any(char::is_control) {
                return Err(format!("{who}: model pattern {pattern:?} must be 1 to 256 printable characters"));
            }
        }
        let roles: BTreeSet<Role> = t.roles.into_iter().collect();
        if roles.contains(&Role::RepositoryFiles) && !roles.contains(&Role::Repository) {
            return Err(format!("{who}: role 'repository-files' needs role 'repository' too"));
        }
        let rate = match (t.rate, t.burst) {
            (None, None) => None,
            (None, Some(_)) => return Err(format!("{who}: 'burst' needs 'rate'")),
            (Some(rate), burst) => {
                if !(rate.is_finite() && rate > 0.0 && rate <= 1e9) {
                    return Err(format!("{who}: rate must be a positive number of requests per second, got {rate}"));
                }
                let burst = burst.unwrap_or_else(|| rate.ceil().clamp(1.0, f64::from(u32::MAX)) as u32);
                if burst == 0 {
                    return Err(format!("{who}: burst must be at least 1"));
                }
                Some((rate, burst))
            }
        };
        if t.max_in_flight == Some(0) {
            return Err(format!("{who}: max_in_flight must be at least 1"));
        }
        if t.keys.is_empty() && t.certificates.is_empty() {
            return Err(format!("{who} has no keys and no certificates: nothing could identify it"));
        }
        let mut key_ids = BTreeSet::new();
        for key in t.keys {
            check_name("key id", &key.id).map_err(|e| format!("{who}: {e}"))?;
            if !key_ids.insert(key.id.clone()) {
                return Err(format!("{who}: key id '{}' is listed twice", key.id));
            }
            let hash = parse_hash(&key.sha256).ok_or_else(|| {
                format!("{who}: key '{}': sha256 must be 64 hexadecimal digits (the key's SHA-256)", key.id)
            })?;
            add(&mut credentials, Credential::Key(hash), index, key.id, &t.name)?;
        }
        for cert in t.certificates {
            let credential = match (cert.cn, cert.san) {
                (Some(cn), None) if valid_cert_name(&cn) => Credential::CommonName(cn),
                (None, Some(san)) if valid_cert_name(&san) => Credential::AltName(san),
                _ => {
                    return Err(format!(
                        "{who}: each certificate names exactly one of 'cn' or 'san', of 1 to 256 printable characters"
                    ));
                }
            };
            add(&mut credentials, credential, index, String::new(), &t.name)?;
        }
        if credentials.len() > MAX_IDENTITIES {
            return Err(format!("more than {MAX_IDENTITIES} keys and certificate names"));
        }
        tenants.push(TenantSpec {
            name: t.name,
            weight: t.weight,
            models: t.models,
            roles,
            rate,
            max_in_flight: t.max_in_flight,
        });
    }
    Ok(TenantsFile { open: doc.open.into_iter().collect(), tenants, credentials })
}

fn add(
    credentials: &mut HashMap<Credential, (usize, String)>,
    credential: Credential,
    index: usize,
    id: String,
    tenant: &str,
) -> Result<(), String> {
    let what = match &credential {
        Credential::Key(_) => format!("key '{id}'"),
        Credential::CommonName(cn) => format!("certificate cn '{cn}'"),
        Credential::AltName(san) => format!("certificate san '{san}'"),
    };
    if let Some((_, other_id)) = credentials.get(&credential) {
        let other = if other_id.is_empty() { String::new() } else { format!(" (as key '{other_id}')") };
        return Err(format!("tenant '{tenant}': {what} is already listed{other}; each identity names one tenant"));
    }
    credentials.insert(credential, (index, id));
    Ok(())
}

/// Tenant names and key ids appear in logs and metric labels: letters, digits, `.`, `_`, `-`.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok { Ok(()) } else { Err(format!("{what} {name:?} must be 1 to 64 letters, digits, '.', '_' or '-'")) }
}

fn valid_cert_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 256 && !name.chars().any(char::is_control)
}

fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Whether the file may be read by every user of the machine (a warning, not an error: the file
/// holds hashes, but a key's owner list and rights are still worth keeping private).
pub fn world_readable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH_A: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
    const HASH_B: &str = "981f46b4a4ecd9b7b1ae2ab24feb4b25c2b7f4ebbce0fe1c1fc3e6f0f0de5a08";

    #[test]
    fn a_full_file_parses_with_its_defaults() {
        let file = parse(&format!(
            r#"
            [[tenant]]
            name = "team-a"
            weight = 3
            models = ["add_sub", "team_a_*"]
            rate = 2.5
            max_in_flight = 4
            keys = [{{ id = "a1", sha256 = "{HASH_A}" }}]
            certificates = [{{ cn = "client-a" }}, {{ san = "a.example" }}]

            [[tenant]]
            name = "ops"
            roles = ["infer", "repository", "repository-files", "statistics"]
            keys = [{{ id = "o1", sha256 = "{HASH_B}" }}]
            "#
        ))
        .unwrap();
        assert_eq!(file.open, BTreeSet::from([OpenApi::Health, OpenApi::Metrics]));
        let a = &file.tenants[0];
        assert_eq!((a.weight, a.rate, a.max_in_flight), (3, Some((2.5, 3)), Some(4)));
        assert_eq!(a.roles, BTreeSet::from([Role::Infer]));
        assert_eq!(file.tenants[1].weight, 1);
        assert_eq!(file.credentials.len(), 4);
        assert_eq!(file.credentials[&Credential::CommonName("client-a".into())].0, 0);
        assert_eq!(file.credentials[&Credential::Key(parse_hash(HASH_B).unwrap())], (1, "o1".to_string()));
    }

    #[test]
    fn mistakes_are_refused_with_what_and_where() {
        let key = |id: &str, h: &str| format!("keys = [{{ id = \"{id}\", sha256 = \"{h}\" }}]");
        let cases = [
            (format!("[[tenant]]\nname = \"a\"\n{}\ncolour = 1", key("k", HASH_A)), "unknown field `colour`"),
            ("bogus = 1".to_string(), "unknown field `bogus`"),
            (
                format!(
                    "[[tenant]]\nname = \"a\"\n{}\n[[tenant]]\nname = \"b\"\n{}",
                    key("k", HASH_A),
                    key("j", HASH_A)
                ),
                "tenant 'b': key 'j' is already listed (as key 'k')",
            ),
            (
                format!(
                    "[[tenant]]\nname = \"a\"\n{}\n[[tenant]]\nname = \"a\"\n{}",
                    key("k", HASH_A),
                    key("j", HASH_B)
                ),
                "tenant 'a' is listed twice",
            ),
            (format!("[[tenant]]\nname = \"a\"\n{}", key("k", "abc")), "sha256 must be 64 hexadecimal digits"),
            ("[[tenant]]\nname = \"a\"".to_string(), "has no keys and no certificates"),
            (format!("[[tenant]]\nname = \"a b\"\n{}", key("k", HASH_A)), "must be 1 to 64 letters"),
            (format!("[[tenant]]\nname = \"a\"\nweight = 0\n{}", key("k", HASH_A)), "weight must be 1 to 1000"),
            (format!("[[tenant]]\nname = \"a\"\nrate = -1.0\n{}", key("k", HASH_A)), "rate must be a positive"),
            (format!("[[tenant]]\nname = \"a\"\nroles = [\"root\"]\n{}", key("k", HASH_A)), "unknown variant `root`"),
            (
                format!("[[tenant]]\nname = \"a\"\nroles = [\"repository-files\"]\n{}", key("k", HASH_A)),
                "needs role 'repository' too",
            ),
            ("[[tenant]]\nname = \"a\"\ncertificates = [{ cn = \"x\", san = \"y\" }]".to_string(), "exactly one of"),
            ("[[tenant]\nname = ".to_string(), "TOML parse error"),
        ];
        for (text, expected) in cases {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }
}
