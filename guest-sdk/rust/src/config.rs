//! The model's configuration as `initialize` receives it ([`InitializeArgs::model_config`]: the JSON
//! the `/config` endpoint returns), with a small JSON reader so that guests need no JSON crate.

use crate::{Error, InitializeArgs};

/// The model's config, parsed: what guests usually read from it (config `parameters`,
/// `max_batch_size`, the name) without a JSON dependency.
///
/// ```ignore
/// fn initialize(args: InitializeArgs) -> Result<Self, Error> {
///     let config = ModelConfig::of(&args)?;
///     let target = config.parameter("target").unwrap_or("add_sub").to_string();
///     // ...
/// }
/// ```
#[derive(Debug, Clone)]
pub struct ModelConfig(Json);

impl ModelConfig {
    /// The config of the model being initialized.
    pub fn of(args: &InitializeArgs) -> Result<ModelConfig, Error> {
        ModelConfig::parse(&args.model_config)
    }

    /// Parses a config as JSON text (an `invalid-arg` error says where it is malformed).
    pub fn parse(json: &str) -> Result<ModelConfig, Error> {
        let mut parser = Parser { text: json, at: 0, depth: 0 };
        let value = parser.value()?;
        parser.whitespace();
        if parser.at != json.len() {
            return Err(parser.error("text after the JSON value"));
        }
        Ok(ModelConfig(value))
    }

    /// The string value of a config parameter (`parameters { key: K value: { string_value: V } }`).
    pub fn parameter(&self, key: &str) -> Option<&str> {
        match self.0.get("parameters")?.get(key)?.get("string_value")? {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// `max_batch_size` (0 when absent: the model does not batch).
    pub fn max_batch_size(&self) -> i64 {
        match self.0.get("max_batch_size") {
            Some(Json::Number(n)) => n.parse().unwrap_or(0),
            _ => 0,
        }
    }

    /// The model's name (empty when absent).
    pub fn name(&self) -> &str {
        match self.0.get("name") {
            Some(Json::String(s)) => s,
            _ => "",
        }
    }
}

/// A JSON value. Numbers keep their text: config integers are 64-bit.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Deep enough for any model config; bounds the recursion on malformed input.
const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> Error {
        Error::invalid_arg(format!("model config JSON: {what} at byte {}", self.at))
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// Consumes `byte` (after whitespace) or fails.
    fn expect(&mut self, byte: u8) -> Result<(), Error> {
        self.whitespace();
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", byte as char)))
        }
    }

    fn value(&mut self) -> Result<Json, Error> {
        self.whitespace();
        match self.peek() {
            Some(b'{') => self.nested(Parser::object),
            Some(b'[') => self.nested(Parser::array),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error("expected a value")),
        }
    }

    fn nested(&mut self, parse: fn(&mut Self) -> Result<Json, Error>) -> Result<Json, Error> {
        if self.depth == MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.depth += 1;
        let value = parse(self);
        self.depth -= 1;
        value
    }

    fn object(&mut self) -> Result<Json, Error> {
        let member = |p: &mut Self| {
            p.whitespace();
            if p.peek() != Some(b'"') {
                return Err(p.error("expected a key"));
            }
            let key = p.string()?;
            p.expect(b':')?;
            Ok((key, p.value()?))
        };
        self.items(b'{', b'}', member).map(Json::Object)
    }

    fn array(&mut self) -> Result<Json, Error> {
        self.items(b'[', b']', Parser::value).map(Json::Array)
    }

    /// The comma-separated items between `open` and `close`, each read with `item`.
    fn items<T>(
        &mut self,
        open: u8,
        close: u8,
        item: impl Fn(&mut Self) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        self.expect(open)?;
        let mut items = Vec::new();
        self.whitespace();
        if self.peek() == Some(close) {
            self.at += 1;
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            self.whitespace();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(byte) if byte == close => {
                    self.at += 1;
                    return Ok(items);
                }
                _ => return Err(self.error(&format!("expected ',' or '{}'", close as char))),
            }
        }
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, Error> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn number(&mut self) -> Result<Json, Error> {
        let start = self.at;
        while matches!(self.peek(), Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')) {
            self.at += 1;
        }
        let text = &self.text[start..self.at];
        if text.parse::<f64>().is_err() {
            return Err(self.error("malformed number"));
        }
        Ok(Json::Number(text.to_string()))
    }

    /// A string at `"`: its value with escapes resolved.
    fn string(&mut self) -> Result<String, Error> {
        self.at += 1; // the opening quote
        let mut out = String::new();
        loop {
            // Copy the plain run up to the next quote or backslash (ASCII, so a char boundary).
            let rest = &self.text[self.at..];
            let run = rest.find(['"', '\\']).ok_or_else(|| self.error("unterminated string"))?;
            out.push_str(&rest[..run]);
            self.at += run;
            if self.peek() == Some(b'"') {
                self.at += 1;
                return Ok(out);
            }
            self.at += 1; // the backslash
            let escaped = self.peek().ok_or_else(|| self.error("unterminated string"))?;
            self.at += 1;
            match escaped {
                b'"' => out.push('"'),
                b'\\' => out.push('\\'),
                b'/' => out.push('/'),
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => {
                    let mut code = self.hex4()?;
                    // A UTF-16 surrogate pair is two escapes; a lone half becomes U+FFFD.
                    if (0xD800..0xDC00).contains(&code) && self.text[self.at..].starts_with("\\u") {
                        self.at += 2;
                        let low = self.hex4()?;
                        code = if (0xDC00..0xE000).contains(&low) {
                            0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            0xFFFD
                        };
                    }
                    out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                }
                _ => return Err(self.error("unknown escape")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let digits = self.text.get(self.at..self.at + 4).ok_or_else(|| self.error("short \\u escape"))?;
        let unit = u32::from_str_radix(digits, 16).map_err(|_| self.error("malformed \\u escape"))?;
        self.at += 4;
        Ok(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_parameters_and_max_batch_size() {
        let config = ModelConfig::parse(
            r#"{"name":"m","max_batch_size":8,"input":[{"dims":[16],"optional":false}],
                "parameters":{"target":{"string_value":"add_sub"},"odd":{"string_value":"a\"b\u00e9\ud83d\ude00"}},
                "nothing":null,"ratio":-1.5e3}"#,
        )
        .expect("valid");
        assert_eq!(config.name(), "m");
        assert_eq!(config.max_batch_size(), 8);
        assert_eq!(config.parameter("target"), Some("add_sub"));
        assert_eq!(config.parameter("odd"), Some("a\"b\u{e9}\u{1f600}"));
        assert_eq!(config.parameter("missing"), None);
        assert_eq!(ModelConfig::parse("{}").expect("empty").max_batch_size(), 0);
    }

    #[test]
    fn malformed_json_is_an_error_not_a_panic() {
        for text in ["", "{", r#"{"a":}"#, r#"{"a":1,}"#, r#"{"a":"x"#, r#"{"a":"\u12"}"#, "[1 2]", "{} x", "-"] {
            let err = ModelConfig::parse(text).expect_err(text);
            assert!(err.message.starts_with("model config JSON: "), "{text}: {}", err.message);
        }
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(ModelConfig::parse(&deep).is_err());
    }
}
