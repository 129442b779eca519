//! The `forward()` signature of a TorchScript module: argument names and types.
//!
//! tch exposes no schema API, so this asks libtorch itself: calling `forward()` with no arguments
//! fails in argument binding, before any code runs, with a message that quotes the declaration
//! (`forward(__torch__.M self, Tensor x, Tensor y) -> ...`). That text is parsed here.

use tch::CModule;

/// One `forward()` argument (without `self`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argument {
    pub name: String,
    pub type_name: String,
}

impl Argument {
    /// Triton's backend accepts Tensor and list arguments (and a lone Dict(str, Tensor)).
    fn is_tensor_like(&self) -> bool {
        self.type_name == "Tensor" || self.type_name.ends_with("[]") || self.type_name.starts_with("List[")
    }
}

/// The module's `forward()` arguments, in order, checked the way Triton's backend checks them.
pub fn forward_arguments(module: &CModule) -> Result<Vec<Argument>, String> {
    let message = match module.forward_is::<tch::IValue>(&[]) {
        Ok(_) => return Ok(Vec::new()),
        Err(e) => e.to_string(),
    };
    let arguments = parse_declaration(&message)
        .ok_or_else(|| format!("cannot read the signature of forward(): {}", message.lines().next().unwrap_or("")))?;
    check(&arguments)?;
    Ok(arguments)
}

fn check(arguments: &[Argument]) -> Result<(), String> {
    if let Some(dict) = arguments.iter().find(|a| a.type_name.starts_with("Dict(")) {
        return Err(format!(
            "forward() takes '{}' of type {}: a Dict(str, Tensor) input is not supported by Tessera's TorchScript \
            backend; take the tensors as separate arguments",
            dict.name, dict.type_name
        ));
    }
    if let Some(other) = arguments.iter().find(|a| !a.is_tensor_like()) {
        return Err(format!(
            "An input of type '{}' was detected in the model. Only input(s) of type Tensor are supported.",
            other.type_name
        ));
    }
    Ok(())
}

/// Parses `... Declaration: forward(<type> self, <type> <name>[=default], ...) -> ...`.
fn parse_declaration(message: &str) -> Option<Vec<Argument>> {
    // The message starts "forward() is missing value for argument ..."; the signature follows.
    let declaration = &message[message.find("Declaration: ")?..];
    let start = declaration.find("forward(")? + "forward(".len();
    let rest = &declaration[start..];
    let mut depth = 0usize;
    let mut end = None;
    for (i, c) in rest.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' if depth > 0 => depth -= 1,
            ')' => {
                end = Some(i);
                break;
            }
            _ => {}
        }
    }
    let inner = &rest[..end?];
    let mut arguments = Vec::new();
    for part in split_top_level(inner) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let without_default = part.split('=').next().unwrap_or(part).trim();
        let (type_name, name) = without_default.rsplit_once(' ')?;
        if name == "self" {
            continue;
        }
        arguments.push(Argument { name: name.to_string(), type_name: type_name.trim().to_string() });
    }
    Some(arguments)
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[from..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(message: &str) -> Vec<String> {
        parse_declaration(message).unwrap().into_iter().map(|a| a.name).collect()
    }

    #[test]
    fn reads_argument_names_and_types() {
        let msg = "forward() is missing value for argument 'x'. Declaration: forward(__torch__.AddSub self, \
                   Tensor x, Tensor y) -> ((Tensor, Tensor))\nException raised from ...";
        assert_eq!(names(msg), ["x", "y"]);
        let msg =
            "Declaration: forward(__torch__.M self, Dict(str, Tensor) inputs, Tensor[] xs, Tensor z=None) -> Tensor";
        let args = parse_declaration(msg).unwrap();
        assert_eq!(args.len(), 3);
        assert_eq!(args[0].type_name, "Dict(str, Tensor)");
        assert_eq!(args[1].type_name, "Tensor[]");
        assert_eq!(args[2].name, "z");
        assert!(check(&args).unwrap_err().contains("Dict(str, Tensor) input is not supported"));
        let ints = parse_declaration("Declaration: forward(__torch__.M self, int n) -> Tensor").unwrap();
        assert!(check(&ints).unwrap_err().contains("An input of type 'int' was detected"));
        assert!(parse_declaration("no declaration here").is_none());
    }
}
