//! rapidjson's account of a JSON syntax error, so malformed bodies get Triton's message:
//! `failed to parse the request JSON buffer: <rapidjson text> at <byte offset>`.
//!
//! Bodies are parsed with serde; when that fails on syntax, this checker reads the same bytes as
//! rapidjson's reader does with Triton's flags (`kParseNanAndInfFlag`) and reports the first error
//! where rapidjson reports it. It keeps one byte per open array or object, so any body costs no
//! more than its size. It also says what rapidjson accepts and serde does not: input ends at the
//! first NUL byte, and a leading UTF-8 byte-order mark is skipped.

/// rapidjson's `ParseErrorCode`s that a body can hit, with `GetParseError_En`'s texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Code {
    DocumentEmpty,
    RootNotSingular,
    ValueInvalid,
    ObjectMissName,
    ObjectMissColon,
    ObjectMissCommaOrCurlyBracket,
    ArrayMissCommaOrSquareBracket,
    UnicodeEscapeInvalidHex,
    UnicodeSurrogateInvalid,
    EscapeInvalid,
    MissQuotationMark,
    NumberTooBig,
    NumberMissFraction,
    NumberMissExponent,
}

impl Code {
    fn text(self) -> &'static str {
        match self {
            Self::DocumentEmpty => "The document is empty.",
            Self::RootNotSingular => "The document root must not be followed by other values.",
            Self::ValueInvalid => "Invalid value.",
            Self::ObjectMissName => "Missing a name for object member.",
            Self::ObjectMissColon => "Missing a colon after a name of object member.",
            Self::ObjectMissCommaOrCurlyBracket => "Missing a comma or '}' after an object member.",
            Self::ArrayMissCommaOrSquareBracket => "Missing a comma or ']' after an array element.",
            Self::UnicodeEscapeInvalidHex => "Incorrect hex digit after \\u escape in string.",
            Self::UnicodeSurrogateInvalid => "The surrogate pair in string is invalid.",
            Self::EscapeInvalid => "Invalid escape character in string.",
            Self::MissQuotationMark => "Missing a closing quotation mark in string.",
            Self::NumberTooBig => "Number too big to be stored in double.",
            Self::NumberMissFraction => "Miss fraction part in number.",
            Self::NumberMissExponent => "Miss exponent in number.",
        }
    }
}

/// The body as rapidjson reads it: up to the first NUL byte.
pub fn as_rapidjson_reads(body: &[u8]) -> &[u8] {
    let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
    &body[..end]
}

/// Triton's message for `body` when rapidjson refuses it, or `None` when rapidjson accepts it.
pub fn rapidjson_error(body: &[u8]) -> Option<String> {
    let mut reader = Reader { text: as_rapidjson_reads(body), at: 0 };
    if reader.text.starts_with(b"\xEF\xBB\xBF") {
        reader.at = 3;
    }
    reader
        .document()
        .err()
        .map(|(code, at)| format!("failed to parse the request JSON buffer: {} at {at}", code.text()))
}

struct Reader<'a> {
    text: &'a [u8],
    at: usize,
}

type Parsed = Result<(), (Code, usize)>;

/// What an open container expects next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Array,
    Object,
}

impl Open {
    /// The container a byte opens, if it opens one.
    fn opened_by(byte: u8) -> Option<Self> {
        match byte {
            b'[' => Some(Open::Array),
            b'{' => Some(Open::Object),
            _ => None,
        }
    }

    fn closing(self) -> u8 {
        match self {
            Open::Array => b']',
            Open::Object => b'}',
        }
    }

    /// rapidjson's error for a byte after an element that neither continues nor closes it.
    fn miss_comma_or_close(self) -> Code {
        match self {
            Open::Array => Code::ArrayMissCommaOrSquareBracket,
            Open::Object => Code::ObjectMissCommaOrCurlyBracket,
        }
    }
}

impl Reader<'_> {
    /// The byte at the cursor, 0 at the end (rapidjson's `Peek` on a C string).
    fn peek(&self) -> u8 {
        self.text.get(self.at).copied().unwrap_or(0)
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), b' ' | b'\n' | b'\r' | b'\t') {
            self.at += 1;
        }
    }

    fn consume(&mut self, byte: u8) -> bool {
        if self.peek() == byte {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn fail(&self, code: Code) -> Parsed {
        Err((code, self.at))
    }

    fn document(&mut self) -> Parsed {
        self.skip_whitespace();
        if self.peek() == 0 {
            return self.fail(Code::DocumentEmpty);
        }
        self.value()?;
        self.skip_whitespace();
        if self.peek() != 0 {
            return self.fail(Code::RootNotSingular);
        }
        Ok(())
    }

    /// One value, nested containers included, with an explicit stack (rapidjson recurses).
    fn value(&mut self) -> Parsed {
        let mut stack: Vec<Open> = Vec::new();
        loop {
            // Read a value's start: a scalar, or an opening bracket.
            let opened = match Open::opened_by(self.peek()) {
                Some(open) => {
                    self.at += 1;
                    self.skip_whitespace();
                    if self.consume(open.closing()) {
                        false
                    } else {
                        stack.push(open);
                        self.element_start(open)?;
                        true
                    }
                }
                None => {
                    self.scalar()?;
                    false
                }
            };
            if opened {
                continue;
            }
            // After a value: close containers or move to the next element.
            loop {
                let Some(&open) = stack.last() else { return Ok(()) };
                self.skip_whitespace();
                if self.consume(b',') {
                    self.skip_whitespace();
                    self.element_start(open)?;
                    break;
                }
                if self.consume(open.closing()) {
                    stack.pop();
                    continue;
                }
                return self.fail(open.miss_comma_or_close());
            }
        }
    }

    /// What comes before an element's value: an object member's name and colon.
    fn element_start(&mut self, open: Open) -> Parsed {
        if open == Open::Object { self.member_name() } else { Ok(()) }
    }

    /// A member's name and colon, leaving the cursor at its value.
    fn member_name(&mut self) -> Parsed {
        if self.peek() != b'"' {
            return self.fail(Code::ObjectMissName);
        }
        self.string()?;
        self.skip_whitespace();
        if !self.consume(b':') {
            return self.fail(Code::ObjectMissColon);
        }
        self.skip_whitespace();
        Ok(())
    }

    fn scalar(&mut self) -> Parsed {
        match self.peek() {
            b'"' => self.string(),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            _ => self.number(),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Parsed {
        self.at += 1;
        for &b in &word[1..] {
            if !self.consume(b) {
                return self.fail(Code::ValueInvalid);
            }
        }
        Ok(())
    }

    fn string(&mut self) -> Parsed {
        self.at += 1;
        loop {
            match self.peek() {
                b'"' => {
                    self.at += 1;
                    return Ok(());
                }
                b'\\' => {
                    let escape_at = self.at;
                    self.at += 1;
                    match self.peek() {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            self.at += 1;
                            let high = self.hex4()?;
                            if (0xD800..=0xDBFF).contains(&high) {
                                if !(self.consume(b'\\') && self.consume(b'u')) {
                                    return self.fail(Code::UnicodeSurrogateInvalid);
                                }
                                let low = self.hex4()?;
                                if !(0xDC00..=0xDFFF).contains(&low) {
                                    return self.fail(Code::UnicodeSurrogateInvalid);
                                }
                            }
                        }
                        _ => return Err((Code::EscapeInvalid, escape_at)),
                    }
                }
                0 => return self.fail(Code::MissQuotationMark),
                c if c < 0x20 => return self.fail(Code::EscapeInvalid),
                _ => self.at += 1,
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, (Code, usize)> {
        let mut value = 0;
        for _ in 0..4 {
            let digit = char::from(self.peek()).to_digit(16).ok_or((Code::UnicodeEscapeInvalidHex, self.at))?;
            value = value * 16 + digit;
            self.at += 1;
        }
        Ok(value)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while self.peek().is_ascii_digit() {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Parsed {
        let start = self.at;
        self.consume(b'-');
        match self.peek() {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            // kParseNanAndInfFlag: NaN, Inf and Infinity.
            b'N' => return self.literal(b"NaN"),
            b'I' => {
                self.literal(b"Inf")?;
                if self.peek() == b'i' {
                    self.literal(b"inity")?;
                }
                return Ok(());
            }
            _ => return self.fail(Code::ValueInvalid),
        }
        if self.consume(b'.') && self.digits() == 0 {
            return self.fail(Code::NumberMissFraction);
        }
        if self.consume(b'e') || self.consume(b'E') {
            if !self.consume(b'+') {
                self.consume(b'-');
            }
            if self.digits() == 0 {
                return self.fail(Code::NumberMissExponent);
            }
        }
        let text = std::str::from_utf8(&self.text[start..self.at]).unwrap_or("0");
        if text.parse::<f64>().is_ok_and(f64::is_infinite) {
            return Err((Code::NumberTooBig, start));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str) -> Option<String> {
        rapidjson_error(text.as_bytes())
            .map(|m| m.trim_start_matches("failed to parse the request JSON buffer: ").into())
    }

    #[test]
    fn errors_are_rapidjsons_at_its_offsets() {
        // Offsets observed on Triton 2.51 (docs/triton-http-behaviour.md, "HTTP JSON syntax error").
        assert_eq!(message(r#"{"inputs":[{"name":"#).as_deref(), Some("Invalid value. at 19"));
        assert_eq!(message(r#"{"inputs" 1}"#).as_deref(), Some("Missing a colon after a name of object member. at 10"));
        assert_eq!(
            message(r#"{"inputs":1 "b":2}"#).as_deref(),
            Some("Missing a comma or '}' after an object member. at 12")
        );
        assert_eq!(message("{").as_deref(), Some("Missing a name for object member. at 1"));
        assert_eq!(message("").as_deref(), Some("The document is empty. at 0"));
        assert_eq!(message("{} x").as_deref(), Some("The document root must not be followed by other values. at 3"));
        assert_eq!(message("[1 2]").as_deref(), Some("Missing a comma or ']' after an array element. at 3"));
        assert_eq!(message(r#"{"a":"\x"}"#).as_deref(), Some("Invalid escape character in string. at 6"));
        assert_eq!(message(r#"{"a":"abc"#).as_deref(), Some("Missing a closing quotation mark in string. at 9"));
        assert_eq!(message(r#"{"a":1.}"#).as_deref(), Some("Miss fraction part in number. at 7"));
        assert_eq!(message(r#"{"a":1e}"#).as_deref(), Some("Miss exponent in number. at 7"));
        assert_eq!(message(r#"{"a":1e999}"#).as_deref(), Some("Number too big to be stored in double. at 5"));
        assert_eq!(message(r#"{"a":1,}"#).as_deref(), Some("Missing a name for object member. at 7"));
        assert_eq!(message("[1,]").as_deref(), Some("Invalid value. at 3"));
        // What rapidjson accepts with Triton's flags.
        for ok in ["[NaN, Inf, -Infinity]", "{\"inputs\":[]}\0garbage", "\u{feff}{}", "[[[[]]]]"] {
            assert_eq!(message(ok), None, "{ok:?}");
        }
        assert_eq!(as_rapidjson_reads(b"{}\0x"), b"{}");
    }
}
