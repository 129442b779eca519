//! Triton's header forwarding (`--http-header-forward-pattern`, `--grpc-header-forward-pattern`,
//! docs/protocol/extension_parameters.md): request headers (gRPC metadata) whose name matches the
//! door's pattern become string parameters of the inference request, where the model reads them
//! (`request.parameters()`). Matching is case-insensitive unless the pattern starts `(?-i)`, and
//! a pattern matches anywhere in the name (RE2's PartialMatch). As Triton 2.7x, a matching header
//! named like a reserved parameter (`sequence_id`, `priority`, `headers`, ...) or beginning with
//! `triton_` fails the request, rather than setting what the server itself decides.

use regex::Regex;

use super::Frontend;
use crate::error::{CoreError, CoreResult};
use crate::infer::{InferRequest, ParamValue};

/// Triton's `kReservedParameterKeys` (common.h).
const RESERVED: [&str; 7] =
    ["sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output"];

/// The door a request came through: each has its own pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Http,
    Grpc,
}

/// The compiled patterns, one per door.
#[derive(Debug, Clone, Default)]
pub struct Patterns {
    http: Option<Regex>,
    grpc: Option<Regex>,
}

impl Patterns {
    /// Compiles the flags' patterns, case-insensitive as Triton's RE2 options make them.
    pub fn new(http: Option<&str>, grpc: Option<&str>) -> Result<Self, String> {
        let compile = |flag: &str, pattern: Option<&str>| -> Result<Option<Regex>, String> {
            pattern
                .filter(|p| !p.is_empty())
                .map(|p| Regex::new(&format!("(?i){p}")).map_err(|e| format!("--{flag}: invalid pattern '{p}': {e}")))
                .transpose()
        };
        Ok(Self {
            http: compile("http-header-forward-pattern", http)?,
            grpc: compile("grpc-header-forward-pattern", grpc)?,
        })
    }
}

impl Frontend {
    /// Forwards headers with the door's patterns (see the module doc).
    pub fn with_header_forwarding(mut self, patterns: Patterns) -> Self {
        self.forward_patterns = patterns;
        self
    }

    /// The headers of a request through `door` that its pattern forwards, as (name, value); an
    /// error for a reserved name. Headers whose value is not text are skipped.
    pub fn forwarded_headers<'a>(
        &self,
        door: Door,
        headers: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> CoreResult<Vec<(String, String)>> {
        let pattern = match door {
            Door::Http => &self.forward_patterns.http,
            Door::Grpc => &self.forward_patterns.grpc,
        };
        let Some(pattern) = pattern else { return Ok(Vec::new()) };
        let mut forwarded = Vec::new();
        for (name, value) in headers {
            if !pattern.is_match(name) {
                continue;
            }
            if RESERVED.contains(&name) || name.starts_with("triton_") {
                return Err(CoreError::invalid_arg(format!(
                    "Header '{name}' is reserved for Triton usage and cannot be forwarded."
                )));
            }
            if let Some(value) = value {
                forwarded.push((name.to_string(), value.to_string()));
            }
        }
        Ok(forwarded)
    }
}

/// Adds forwarded headers to a request's parameters (a header wins over a parameter of the same
/// name the body set).
pub fn add_to(request: &mut InferRequest, forwarded: &[(String, String)]) {
    for (name, value) in forwarded {
        request.parameters.insert(name.clone(), ParamValue::String(value.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_headers_are_forwarded_and_reserved_ones_refused() {
        let frontend = Frontend::for_tests()
            .with_header_forwarding(Patterns::new(Some("prefix_.*"), Some("(?-i)Grpc_.*")).unwrap());
        let headers = [("prefix_user", Some("ada")), ("PREFIX_Team", Some("ml")), ("other", Some("x"))];
        assert_eq!(
            frontend.forwarded_headers(Door::Http, headers).unwrap(),
            vec![("prefix_user".into(), "ada".into()), ("PREFIX_Team".into(), "ml".into())]
        );
        // Case-sensitive with (?-i); gRPC's pattern is its own.
        let metadata = [("grpc_a", Some("1")), ("Grpc_b", Some("2")), ("prefix_user", Some("ada"))];
        assert_eq!(frontend.forwarded_headers(Door::Grpc, metadata).unwrap(), vec![("Grpc_b".into(), "2".into())]);
        let reserved = Frontend::for_tests().with_header_forwarding(Patterns::new(Some(".*"), None).unwrap());
        for name in ["priority", "triton_enable_empty_final_response"] {
            let e = reserved.forwarded_headers(Door::Http, [(name, Some("1"))]).unwrap_err();
            assert_eq!(e.message, format!("Header '{name}' is reserved for Triton usage and cannot be forwarded."));
        }
        assert!(Frontend::for_tests().forwarded_headers(Door::Http, headers).unwrap().is_empty());
        assert!(Patterns::new(Some("("), None).unwrap_err().contains("--http-header-forward-pattern: invalid pattern"));
    }
}
