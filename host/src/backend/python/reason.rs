//! The reason a failed model.py build gives its model: the model's file (relative to the version
//! directory), the line and the cause, read from the Python traceback componentize-py prints when
//! the model's module code raises at build time (`helper.py line 2: SyntaxError: invalid
//! syntax`). The traceback names the guest's paths (`/model/<file>` as the guest SDK names the
//! version directory's modules, or componentize-py's `/<n>/<file>`), never the server's; only a
//! frame whose file is one of the model's own is named. What the uploader's code printed is
//! bounded and stripped of control characters before it is ever echoed.

/// The most characters of the cause (the exception's first line) a reason quotes.
const MAX_CAUSE: usize = 400;
/// The most characters of a file name a reason quotes.
const MAX_FILE: usize = 200;

/// `FILE line N: Exception: message` from the builder's output, naming the deepest frame in one
/// of `files` (the model's `.py` files, relative to the version directory); only the cause
/// when no frame is the model's; `None` when the output holds no Python exception.
pub(super) fn from_output(output: &str, files: &[String]) -> Option<String> {
    let lines: Vec<&str> = output.lines().collect();
    // The last traceback is the one that ended the build (a chained exception prints the
    // earlier ones first; componentize-py's own frames come before the guest's).
    let start = lines.iter().rposition(|l| l.contains("Traceback (most recent call last):"))?;
    let block = &lines[start + 1..];
    let mut frame = None;
    let mut last_frame_at = None;
    for (i, line) in block.iter().enumerate() {
        let Some((path, number)) = parse_frame(line) else { continue };
        last_frame_at = Some(i);
        if let Some(file) = model_file(path, files) {
            frame = Some((file, number));
        }
    }
    let after = last_frame_at.map_or(0, |i| i + 1);
    let cause = block[after..]
        .iter()
        .find(|l| !l.is_empty() && !l.starts_with(char::is_whitespace) && is_exception(l))
        .map(|l| l.to_string())
        .or_else(|| caused_by(&lines))?;
    let cause = clean(&cause, MAX_CAUSE);
    Some(match frame {
        Some((file, number)) => format!("{} line {number}: {cause}", clean(file, MAX_FILE)),
        None => cause,
    })
}

/// `  File "PATH", line N[, in NAME]` as Python prints a frame.
fn parse_frame(line: &str) -> Option<(&str, u64)> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (path, rest) = rest.rsplit_once("\", line ")?;
    let digits: &str = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    Some((path, digits.parse().ok()?))
}

/// The model's own file a traceback path names: `/model/<file>` or `/<n>/<file>`, `<file>` being
/// one of `files`.
fn model_file<'a>(path: &str, files: &'a [String]) -> Option<&'a str> {
    let relative = match path.strip_prefix("/model/") {
        Some(rest) => rest,
        None => {
            let rest = path.strip_prefix('/')?;
            let (index, rest) = rest.split_once('/')?;
            if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            rest
        }
    };
    files.iter().find(|f| *f == relative).map(String::as_str)
}

/// A line Python prints for the exception itself: `Name: message` or a bare `Name`
/// (`pkg.module.Name` for an exception class of a module).
fn is_exception(line: &str) -> bool {
    let name = line.split_once(':').map_or(line, |(name, _)| name).trim_end();
    !name.is_empty()
        && name.split('.').all(|part| {
            part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        && (name.ends_with("Error") || name.ends_with("Exception") || name.ends_with("Exit") || line.contains(':'))
}

/// componentize-py's summary: the first line after `Caused by:`.
fn caused_by(lines: &[&str]) -> Option<String> {
    let at = lines.iter().rposition(|l| l.trim() == "Caused by:")?;
    lines[at + 1..].iter().map(|l| l.trim()).find(|l| !l.is_empty()).map(str::to_string)
}

/// `text` without control characters, at most `max` characters (an ellipsis says it was cut).
pub(super) fn clean(text: &str, max: usize) -> String {
    let mut out: String = text.chars().filter(|c| !c.is_control()).take(max).collect();
    if text.chars().filter(|c| !c.is_control()).nth(max).is_some() {
        out.push('…');
    }
    out
}

/// The builder's own output, for a failure with no Python exception: its last lines, with
/// control characters (terminal escapes included) stripped from each.
pub(super) fn clean_lines(text: &str, max: usize) -> String {
    let lines: Vec<String> = text.lines().map(|l| clean(l, max)).collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    const OUTER: &str = "Traceback (most recent call last):\n  File \"/srv/checkout/.venv/bin/componentize-py\", \
                         line 8, in <module>\n    sys.exit(script())\n             ^^^^^^^^\nAssertionError: ";

    #[test]
    fn a_syntax_error_in_a_sibling_module_names_it() {
        let output = format!(
            "{OUTER}Traceback (most recent call last):\n  File \"/1/tessera_guest/app.py\", line 35, in \
             <module>\n    _user_model = _entry.import_model()\n  File \"/model/model.py\", line 1, in \
             <module>\n    import helper\n  File \"/model/helper.py\", line 2\n    def f(:\n          ^\n\
             SyntaxError: invalid syntax\n\n\nCaused by:\n    SyntaxError: invalid syntax (helper.py, line 2)\n"
        );
        let reason = from_output(&output, &files(&["helper.py", "model.py"]));
        assert_eq!(reason.as_deref(), Some("helper.py line 2: SyntaxError: invalid syntax"));
    }

    #[test]
    fn an_exception_at_import_names_the_deepest_frame_of_the_model() {
        let output = format!(
            "{OUTER}Traceback (most recent call last):\n  File \"/1/tessera_guest/app.py\", line 35, in <module>\n  \
             File \"/0/model.py\", line 10, in <module>\n    load()\n  File \"/0/model.py\", line 7, in load\n    \
             raise RuntimeError(\"bad config\")\n  File \"/3/numpy/core.py\", line 99, in thing\n\
             RuntimeError: bad config\n\nCaused by:\n    RuntimeError: bad config\n"
        );
        assert_eq!(
            from_output(&output, &files(&["model.py"])).as_deref(),
            Some("model.py line 7: RuntimeError: bad config")
        );
        // A file of the same name outside the model is not it.
        assert_eq!(from_output(&output, &files(&["core.py"])).as_deref(), Some("RuntimeError: bad config"));
    }

    #[test]
    fn chained_exceptions_report_the_last_and_subpackages_keep_their_path() {
        let output = "Traceback (most recent call last):\n  File \"/model/a.py\", line 1, in <module>\n\
                      KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n\
                      Traceback (most recent call last):\n  File \"/model/sub/b.py\", line 4, in <module>\n\
                      ModuleNotFoundError: No module named 'foo'\n";
        assert_eq!(
            from_output(output, &files(&["a.py", "sub/b.py"])).as_deref(),
            Some("sub/b.py line 4: ModuleNotFoundError: No module named 'foo'")
        );
    }

    #[test]
    fn causes_are_bounded_and_without_control_characters() {
        let long = "x".repeat(5000);
        let output = format!(
            "Traceback (most recent call last):\n  File \"/model/model.py\", line 3, in <module>\n\
             ValueError: \u{1b}[31mred\u{7}{long}\n"
        );
        let reason = from_output(&output, &files(&["model.py"])).expect("reason");
        assert!(reason.starts_with("model.py line 3: ValueError: [31mred"), "{reason}");
        assert!(!reason.chars().any(char::is_control));
        assert!(reason.chars().count() <= "model.py line 3: ".len() + MAX_CAUSE + 1);
        assert!(reason.ends_with('…'));
    }

    #[test]
    fn output_without_a_python_exception_gives_none() {
        assert_eq!(from_output("pip: no matching distribution\n", &files(&["model.py"])), None);
        assert_eq!(from_output("", &[]), None);
        // componentize-py's summary alone still names the cause.
        let output = "Traceback (most recent call last):\n\nCaused by:\n    ImportError: cannot import name 'x'\n";
        assert_eq!(from_output(output, &[]).as_deref(), Some("ImportError: cannot import name 'x'"));
    }

    #[test]
    fn frames_parse() {
        assert_eq!(parse_frame("  File \"/model/a b.py\", line 12, in f"), Some(("/model/a b.py", 12)));
        assert_eq!(parse_frame("  File \"/0/x.py\", line 3"), Some(("/0/x.py", 3)));
        assert_eq!(parse_frame("File x"), None);
        assert_eq!(model_file("/model/x.py", &files(&["x.py"])), Some("x.py"));
        assert_eq!(model_file("/12/x.py", &files(&["x.py"])), Some("x.py"));
        assert_eq!(model_file("/a/x.py", &files(&["x.py"])), None);
        assert_eq!(model_file("x.py", &files(&["x.py"])), None);
        assert!(is_exception("SyntaxError: invalid syntax"));
        assert!(is_exception("mypkg.errors.Boom: no"));
        assert!(is_exception("KeyboardInterrupt: "));
        assert!(is_exception("SystemExit"));
        assert!(!is_exception("    ^^^^"));
        assert!(!is_exception("build-python-guest failed"));
    }
}
