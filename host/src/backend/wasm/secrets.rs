//! The operator's secrets for guests (`tessera serve --guest-secrets FILE`), served to the models
//! they are granted to through `wasi:config` (see `config_store`). The file is TOML:
//!
//! ```toml
//! [secrets.moderation_key]
//! env = "MODERATION_KEY"          # a variable of the server's environment, or:
//! # file = "/run/secrets/moderation_key"   (its contents, one trailing newline dropped)
//! models = ["moderator", "pre_*"] # the models granted it: names, `*` and `?` globs
//! ```
//!
//! - Values never sit in the file itself: a secret comes from the server's environment or from a
//!   file outside every model repository, never from anything an upload can write.
//! - The file is read at startup (a file that does not parse stops the server) and again at each
//!   load of a Wasm model, so a rotated secret (or a changed grant) reaches a model when it is
//!   loaded again. A value that cannot be read then leaves that model unavailable, saying which
//!   secret and why, never what it holds.
//! - Grants follow the model's name: whoever may load a model of a granted name (the
//!   `repository` role with a tenants file) gets its secrets. A model's config cannot widen them.
//! - Values are held in memory that is wiped on drop, and print as `<redacted>`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use zeroize::Zeroizing;

use crate::tenant::ModelRules;

/// At most this many secrets, each of at most this many bytes.
const MAX_SECRETS: usize = 1024;
const MAX_VALUE_BYTES: u64 = 64 << 10;
/// The file itself (names, sources and grants) is at most this big.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Whether `key` may name a value served through wasi:config (a secret, or a `config.`
/// parameter's suffix): 1 to 128 letters, digits, '_', '-' and '.'.
pub(crate) fn valid_key(key: &str) -> bool {
    (1..=128).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

/// A secret's value: wiped from memory when dropped, never printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(Zeroizing<String>);

impl Secret {
    pub(crate) fn new(value: String) -> Self {
        Self(Zeroizing::new(value))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    secrets: BTreeMap<String, SecretDoc>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretDoc {
    env: Option<String>,
    file: Option<PathBuf>,
    models: Vec<String>,
}

/// Where one secret's value comes from.
#[derive(Clone, Debug)]
enum Source {
    Env(String),
    File(PathBuf),
}

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    source: Source,
    models: ModelRules,
}

/// The secrets file: where it is, and what it said when last read.
#[derive(Clone, Debug, Default)]
pub struct GuestSecrets {
    path: Option<PathBuf>,
    /// Directories no secret file may be in (the model repositories).
    repositories: Vec<PathBuf>,
}

impl GuestSecrets {
    /// Reads the file at `path`, refusing one whose secrets' files lie inside `repositories`.
    pub fn load(path: &Path, repositories: &[PathBuf]) -> Result<Self, String> {
        let repositories: Vec<PathBuf> =
            repositories.iter().map(|r| r.canonicalize().unwrap_or_else(|_| r.clone())).collect();
        read_file(path, &repositories)?;
        Ok(Self { path: Some(path.to_path_buf()), repositories })
    }

    /// Whether the operator named no secrets file.
    pub fn is_empty(&self) -> bool {
        self.path.is_none()
    }

    /// The secrets granted to `model`, read now (the file again, then each value), by name.
    pub(crate) fn for_model(&self, model: &str) -> Result<Vec<(String, Secret)>, String> {
        let Some(path) = &self.path else { return Ok(Vec::new()) };
        // Read again: a rotated secret (or a changed grant) takes effect at the model's next load.
        let entries = read_file(path, &self.repositories)?;
        entries.iter().filter(|e| e.models.matches(model)).map(|e| Ok((e.name.clone(), value_of(e)?))).collect()
    }
}

fn read_file(path: &Path, repositories: &[PathBuf]) -> Result<Vec<Entry>, String> {
    let shown = path.display();
    let text = read_bounded(path, MAX_FILE_BYTES).map_err(|e| format!("secrets file {shown}: {e}"))?;
    // Only the message and the line: toml's own rendering quotes the line, which is the
    // operator's, but a rule that never prints the file is simpler to keep.
    let doc: FileDoc = toml::from_str(&text).map_err(|e| {
        let line = e.span().map_or(0, |s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        format!("secrets file {shown}, line {line}: {}", e.message().trim_end())
    })?;
    if doc.secrets.len() > MAX_SECRETS {
        return Err(format!("secrets file {shown}: more than {MAX_SECRETS} secrets"));
    }
    doc.secrets
        .into_iter()
        .map(|(name, secret)| {
            let at = format!("secrets file {shown}, secret '{}'", name.escape_debug());
            if !valid_key(&name) {
                return Err(format!("{at}: a name is 1 to 128 letters, digits, '_', '-' and '.'"));
            }
            let source = match (secret.env, secret.file) {
                (Some(var), None) if !var.is_empty() => Source::Env(var),
                (None, Some(file)) => Source::File(outside(&file, repositories).map_err(|e| format!("{at}: {e}"))?),
                _ => return Err(format!("{at}: give exactly one of `env` (a variable name) and `file`")),
            };
            if secret.models.is_empty() {
                return Err(format!("{at}: `models` grants it to no model"));
            }
            Ok(Entry { name, source, models: ModelRules::new(secret.models) })
        })
        .collect()
}

/// `file`, made absolute, when it lies outside every repository.
fn outside(file: &Path, repositories: &[PathBuf]) -> Result<PathBuf, String> {
    if !file.is_absolute() {
        return Err("`file` must be an absolute path".into());
    }
    let real = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    if repositories.iter().any(|r| real.starts_with(r)) {
        return Err("`file` lies inside a model repository, which uploads can write".into());
    }
    Ok(file.to_path_buf())
}

fn value_of(entry: &Entry) -> Result<Secret, String> {
    let at = format!("secret '{}'", entry.name);
    match &entry.source {
        Source::Env(var) => match std::env::var(var) {
            Ok(value) if value.len() as u64 <= MAX_VALUE_BYTES => Ok(Secret::new(value)),
            Ok(_) => Err(format!("{at}: its variable holds more than {MAX_VALUE_BYTES} bytes")),
            Err(_) => Err(format!("{at}: its environment variable is not set (or not Unicode)")),
        },
        Source::File(path) => {
            let mut value = read_bounded(path, MAX_VALUE_BYTES).map_err(|e| format!("{at}: {e}"))?;
            if value.ends_with('\n') {
                value.pop();
            }
            Ok(Secret::new(value))
        }
    }
}

/// A UTF-8 file of at most `limit` bytes; errors say what was wrong, never what it held.
fn read_bounded(path: &Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {}", path.display(), e.kind()))?;
    let mut bytes = Zeroizing::new(Vec::new());
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {}", path.display(), e.kind()))?;
    if bytes.len() as u64 > limit {
        return Err(format!("{} holds more than {limit} bytes", path.display()));
    }
    String::from_utf8(std::mem::take(&mut *bytes)).map_err(|_| format!("{} is not UTF-8", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wasm::test_support::TempDir;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn grants_by_model_name_and_reads_values_at_each_load() {
        let tmp = TempDir::new("secrets");
        let value = write(&tmp.0, "value", "first\n");
        let file = write(
            &tmp.0,
            "secrets.toml",
            &format!("[secrets.api_key]\nfile = \"{}\"\nmodels = [\"pre_*\", \"moderator\"]\n", value.display()),
        );
        let secrets = GuestSecrets::load(&file, &[]).expect("load");
        assert!(secrets.for_model("other").expect("none").is_empty());
        let got = secrets.for_model("pre_a").expect("granted");
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0.as_str(), got[0].1.expose()), ("api_key", "first"));
        assert_eq!(format!("{:?}", got[0].1), "<redacted>");
        std::fs::write(&value, "second").expect("rotate");
        assert_eq!(secrets.for_model("moderator").expect("granted")[0].1.expose(), "second");
        std::fs::remove_file(&value).expect("remove");
        let e = secrets.for_model("moderator").expect_err("unreadable");
        assert!(e.starts_with("secret 'api_key': cannot open"), "{e}");
    }

    #[test]
    fn refuses_files_in_repositories_and_bad_entries_without_printing_values() {
        let tmp = TempDir::new("secrets-bad");
        let repo = tmp.0.join("repo");
        std::fs::create_dir_all(&repo).expect("repo");
        let inside = write(&repo, "stolen", "x");
        let file =
            write(&tmp.0, "a.toml", &format!("[secrets.k]\nfile = \"{}\"\nmodels = [\"m\"]\n", inside.display()));
        let e = GuestSecrets::load(&file, std::slice::from_ref(&repo)).expect_err("inside a repository");
        assert!(e.contains("inside a model repository"), "{e}");
        for (text, says) in [
            ("[secrets.k]\nenv = \"A\"\nfile = \"/x\"\nmodels = [\"m\"]\n", "exactly one of"),
            ("[secrets.k]\nenv = \"A\"\nmodels = []\n", "grants it to no model"),
            ("[secrets.k]\nvalue = \"MARKER-1234\"\nmodels = [\"m\"]\n", "line 2"),
            ("[secrets.\"a b\"]\nenv = \"A\"\nmodels = [\"m\"]\n", "a name is"),
            ("[secrets.k]\nfile = \"relative\"\nmodels = [\"m\"]\n", "absolute"),
        ] {
            let path = write(&tmp.0, "b.toml", text);
            let e = GuestSecrets::load(&path, &[]).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("MARKER"), "{e}");
        }
    }

    #[test]
    fn reads_environment_values_and_bounds_them() {
        let tmp = TempDir::new("secrets-env");
        let var = "TESSERA_TEST_SECRET_UNSET_4711";
        let file = write(&tmp.0, "s.toml", &format!("[secrets.k]\nenv = \"{var}\"\nmodels = [\"m\"]\n"));
        let secrets = GuestSecrets::load(&file, &[]).expect("load");
        let e = secrets.for_model("m").expect_err("unset");
        assert_eq!(e, "secret 'k': its environment variable is not set (or not Unicode)");
        let big = write(&tmp.0, "big", &"x".repeat(70_000));
        let file = write(&tmp.0, "t.toml", &format!("[secrets.k]\nfile = \"{}\"\nmodels = [\"m\"]\n", big.display()));
        let e = GuestSecrets::load(&file, &[]).expect("load").for_model("m").expect_err("too big");
        assert!(e.contains("more than 65536 bytes"), "{e}");
    }
}
