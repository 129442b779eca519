//! Triton's restricted APIs: `--http-restricted-api=<api-list>:<key>=<value>` and
//! `--grpc-restricted-protocol=<protocol-list>:<key>=<value>` make each listed category answer
//! only requests that carry header `<key>` with `<value>` (gRPC: metadata
//! `triton-grpc-protocol-<key>`). Both doors classify their routes into the same categories and
//! ask [`Restrictions::check`]; the answer to a missing or wrong header is Triton's (HTTP 403,
//! gRPC UNAVAILABLE, with the messages below, checked against tritonserver 2.51).

use std::collections::BTreeMap;

/// Triton's API categories, as the flags name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiCategory {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
    /// OpenAI's API, `/v1/*` (Tessera's own group: Triton's v2 doors have no `/v1`).
    OpenAi,
}

impl ApiCategory {
    pub const ALL: [ApiCategory; 10] = [
        Self::Health,
        Self::Metadata,
        Self::Inference,
        Self::SharedMemory,
        Self::ModelConfig,
        Self::ModelRepository,
        Self::Statistics,
        Self::Trace,
        Self::Logging,
        Self::OpenAi,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Health => "health",
            Self::Metadata => "metadata",
            Self::Inference => "inference",
            Self::SharedMemory => "shared-memory",
            Self::ModelConfig => "model-config",
            Self::ModelRepository => "model-repository",
            Self::Statistics => "statistics",
            Self::Trace => "trace",
            Self::Logging => "logging",
            Self::OpenAi => "openai",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The category of an HTTP route (`None`: not a Triton API, e.g. a 404).
    pub fn of_http_path(path: &str) -> Option<Self> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        Some(match segments.as_slice() {
            ["v2"] => Self::Metadata,
            ["v2", "health", ..] => Self::Health,
            ["v2", "models", "stats"] => Self::Statistics,
            ["v2", "repository", ..] => Self::ModelRepository,
            ["v2", "systemsharedmemory" | "cudasharedmemory", ..] => Self::SharedMemory,
            ["v2", "trace", ..] => Self::Trace,
            ["v2", "logging"] => Self::Logging,
            ["v1", ..] => Self::OpenAi,
            ["v2", "models", _model, rest @ ..] => {
                let rest = match rest {
                    ["versions", _version, rest @ ..] => rest,
                    rest => rest,
                };
                match rest {
                    [] => Self::Metadata,
                    ["ready"] => Self::Health,
                    ["config"] => Self::ModelConfig,
                    ["stats"] => Self::Statistics,
                    ["infer" | "generate" | "generate_stream"] => Self::Inference,
                    ["trace", "setting"] => Self::Trace,
                    _ => return None,
                }
            }
            _ => return None,
        })
    }
}

/// The header a restricted category needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// As given on the command line (quoted in the refusal); matched without regard to case.
    pub key: String,
    pub value: String,
}

/// Which categories need which header, for one door.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restrictions {
    rules: BTreeMap<ApiCategory, Rule>,
}

/// What a door answers when a restricted call lacks the right header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The header (HTTP) or metadata key (gRPC) the call needs.
    pub expected: String,
}

impl Restrictions {
    /// Parses the values of one repeated flag (`flag`: `http-restricted-api` or
    /// `grpc-restricted-protocol`). Each value is `<category>[,<category>...]:<key>=<value>`
    /// (split at the first ':' and the first '=' after it); a category may be restricted only
    /// once. The errors are Triton's (its command_line_parser.cc).
    pub fn parse(flag: &str, values: &[String]) -> Result<Self, String> {
        let noun = if flag.starts_with("grpc") { "protocol" } else { "api" };
        let mut rules = BTreeMap::new();
        for value in values {
            let format = || format!("--{flag} option format is '<config name>:<setting>=<value>'. Got {value}");
            let (list, rule) = value.split_once(':').ok_or_else(format)?;
            let (key, expected) = rule.split_once('=').ok_or_else(format)?;
            if list.is_empty() || key.is_empty() || expected.is_empty() {
                return Err(format());
            }
            for name in list.split(',') {
                let category = ApiCategory::parse(name)
                    .filter(|c| *c != ApiCategory::OpenAi || noun == "api")
                    .ok_or_else(|| format!("unknown restricted {noun} '{name}'"))?;
                let rule = Rule { key: key.to_string(), value: expected.to_string() };
                if rules.insert(category, rule).is_some() {
                    return Err(format!("restricted {noun} '{name}' can not be specified in multiple config groups"));
                }
            }
        }
        Ok(Self { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether a call of `category` may go on; `header(name)` reads the request's header
    /// (HTTP) or metadata (gRPC, given the prefixed key) by lower-case name. `prefix` is
    /// prepended to the rule's key: empty for HTTP, `triton-grpc-protocol-` for gRPC.
    pub fn check<'a>(
        &self,
        category: ApiCategory,
        prefix: &str,
        header: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<(), Refusal> {
        let Some(rule) = self.rules.get(&category) else { return Ok(()) };
        let name = format!("{prefix}{}", rule.key).to_ascii_lowercase();
        if header(&name).is_some_and(|given| same_secret(given.as_bytes(), rule.value.as_bytes())) {
            return Ok(());
        }
        Err(Refusal { expected: format!("{prefix}{}", rule.key) })
    }
}

/// Compares a header with the rule's value in time that depends on their lengths only, not on
/// where they first differ: the value is the operator's secret.
fn same_secret(given: &[u8], secret: &[u8]) -> bool {
    let mut differ = given.len() ^ secret.len();
    for (i, byte) in secret.iter().enumerate() {
        differ |= usize::from(byte ^ given.get(i).copied().unwrap_or(!byte));
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_matches_only_itself() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        for other in [&b""[..], b"s3cre", b"s3cret!", b"S3cret", b"s3creu"] {
            assert!(!same_secret(other, b"s3cret"), "{other:?}");
        }
        assert!(same_secret(b"", b""));
    }

    fn parse(values: &[&str]) -> Result<Restrictions, String> {
        Restrictions::parse("http-restricted-api", &values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn flags_parse_into_one_rule_per_category() {
        let r = parse(&["statistics,model-config:Tok=secret", "logging:other=x=y"]).unwrap();
        let header = |want: &'static str, value: &'static str| move |name: &str| (name == want).then_some(value);
        assert!(r.check(ApiCategory::Statistics, "", header("tok", "secret")).is_ok());
        assert_eq!(
            r.check(ApiCategory::ModelConfig, "", header("tok", "wrong")),
            Err(Refusal { expected: "Tok".into() })
        );
        // The value is everything after the first '='.
        assert!(r.check(ApiCategory::Logging, "", header("other", "x=y")).is_ok());
        assert!(r.check(ApiCategory::Inference, "", |_| None).is_ok(), "unlisted categories stay open");
        let grpc =
            r.check(ApiCategory::Statistics, "triton-grpc-protocol-", header("triton-grpc-protocol-tok", "secret"));
        assert!(grpc.is_ok());
    }

    #[test]
    fn bad_flags_are_refused_with_tritons_messages() {
        let format = "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got statistics";
        assert_eq!(parse(&["statistics"]).unwrap_err(), format);
        assert!(parse(&["statistics:key"]).unwrap_err().starts_with("--http-restricted-api option format"));
        assert!(parse(&["statistics:key="]).unwrap_err().starts_with("--http-restricted-api option format"));
        assert_eq!(parse(&["stats:k=v"]).unwrap_err(), "unknown restricted api 'stats'");
        assert_eq!(parse(&["a,,b:k=v"]).unwrap_err(), "unknown restricted api 'a'");
        assert_eq!(
            parse(&["trace:k=v", "trace:j=w"]).unwrap_err(),
            "restricted api 'trace' can not be specified in multiple config groups"
        );
        let grpc = Restrictions::parse("grpc-restricted-protocol", &["health,health:k=v".to_string()]);
        assert_eq!(grpc.unwrap_err(), "restricted protocol 'health' can not be specified in multiple config groups");
    }

    #[test]
    fn http_routes_fall_into_tritons_categories() {
        use ApiCategory::*;
        let cases = [
            ("/v2", Some(Metadata)),
            ("/v2/health/ready", Some(Health)),
            ("/v2/models/m/versions/2/ready", Some(Health)),
            ("/v2/models/m", Some(Metadata)),
            ("/v2/models/m/config", Some(ModelConfig)),
            ("/v2/models/m/versions/1/infer", Some(Inference)),
            ("/v2/models/m/generate_stream", Some(Inference)),
            ("/v2/models/stats", Some(Statistics)),
            ("/v2/models/m/stats", Some(Statistics)),
            ("/v2/repository/index", Some(ModelRepository)),
            ("/v2/cudasharedmemory/status", Some(SharedMemory)),
            ("/v2/models/m/trace/setting", Some(Trace)),
            ("/v2/logging", Some(Logging)),
            ("/metrics", None),
        ];
        for (path, category) in cases {
            assert_eq!(ApiCategory::of_http_path(path), category, "{path}");
        }
    }
}
