//! Which `forward()` argument each configured input is, and which returned value each configured
//! output is: Triton's PyTorch backend naming conventions.
//!
//! Inputs: when every configured name is a `forward()` argument name, by name; else when every
//! name is `<name>__<index>`, by that index; else by the order of the config. Outputs: by
//! `<name>__<index>` when every name has one, else by config order.

use super::schema::Argument;
use tessera::{CoreError, CoreResult};

/// `<name>__<index>`: the index after the first `__`, when it is all digits (as Triton reads it).
fn named_index(name: &str) -> Option<usize> {
    let (_, index) = name.split_once("__")?;
    if !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Triton's atoi reads "" as 0.
    Some(index.parse().unwrap_or(0))
}

pub fn input_indices(names: &[&str], arguments: &[Argument], model: &str) -> CoreResult<Vec<usize>> {
    let by_argument: Option<Vec<usize>> = names.iter().map(|n| arguments.iter().position(|a| a.name == *n)).collect();
    let indices = match by_argument {
        Some(indices) => indices,
        None => match names.iter().map(|n| named_index(n)).collect::<Option<Vec<_>>>() {
            Some(indices) => indices,
            None => {
                tracing::warn!(
                    model,
                    "inputs are neither forward() arguments ({}) nor follow the <name>__<index> naming convention; \
                    binding them in the order of the model configuration",
                    arguments.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
                );
                (0..names.len()).collect()
            }
        },
    };
    for (name, &index) in names.iter().zip(&indices) {
        if index >= arguments.len() {
            return Err(CoreError::invalid_arg(format!(
                "input '{name}' of model '{model}' refers to forward() argument {index}, but forward() takes {} \
                argument(s)",
                arguments.len()
            )));
        }
        if let Some((other, _)) = names.iter().zip(&indices).find(|(n, i)| **i == index && *n != name) {
            return Err(CoreError::invalid_arg(format!(
                "inputs '{other}' and '{name}' of model '{model}' both bind to forward() argument {index}"
            )));
        }
    }
    Ok(indices)
}

pub fn output_indices(names: &[&str]) -> Vec<usize> {
    names.iter().map(|n| named_index(n)).collect::<Option<Vec<_>>>().unwrap_or_else(|| (0..names.len()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(names: &[&str]) -> Vec<Argument> {
        names.iter().map(|n| Argument { name: n.to_string(), type_name: "Tensor".into() }).collect()
    }

    #[test]
    fn inputs_bind_by_argument_name_then_index_then_order() {
        let a = args(&["x", "y"]);
        assert_eq!(input_indices(&["y", "x"], &a, "m").unwrap(), [1, 0]);
        assert_eq!(input_indices(&["INPUT__1", "INPUT__0"], &a, "m").unwrap(), [1, 0]);
        assert_eq!(input_indices(&["b", "a"], &a, "m").unwrap(), [0, 1], "config order");
        assert_eq!(input_indices(&["x", "INPUT__0"], &a, "m").unwrap(), [0, 1], "mixed: config order");
        let err = input_indices(&["IN__0", "IN__5"], &a, "m").unwrap_err();
        assert!(err.message.contains("refers to forward() argument 5"), "{}", err.message);
        let err = input_indices(&["A__0", "B__0"], &a, "m").unwrap_err();
        assert!(err.message.contains("both bind to forward() argument 0"), "{}", err.message);
    }

    #[test]
    fn outputs_bind_by_index_or_order() {
        assert_eq!(output_indices(&["OUTPUT__1", "OUTPUT__0"]), [1, 0]);
        assert_eq!(output_indices(&["sum", "OUTPUT__0"]), [0, 1]);
        assert_eq!(named_index("a__b"), None);
    }
}
