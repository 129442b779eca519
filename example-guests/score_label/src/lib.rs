//! Post-processing for the `text_scorer` ONNX model (the last step of the quickstart
//! `text_pipeline` ensemble).
//!
//! Inputs, per row of a batch: `TOKEN_COUNT` FP32 `[1]` (tokens including `[CLS]` and `[SEP]`,
//! as the `tokenizer` guest counts them) and `ID_SUM` INT64 `[1]`. Outputs per row:
//! * `MEAN_ID` FP32 `[1]`: `ID_SUM / TOKEN_COUNT` (0 when the count is 0);
//! * `LABEL` BYTES `[1]`: from the number of words (`TOKEN_COUNT - 2`): `"empty"` (none),
//!   `"short"` (1 to 4) or `"long"` (more).

use tessera_guest::{Error, Request, Tensor, export_model};

fn label(token_count: f32) -> &'static str {
    let words = (token_count - 2.0).max(0.0);
    if words < 1.0 {
        "empty"
    } else if words <= 4.0 {
        "short"
    } else {
        "long"
    }
}

fn score_and_label(request: &Request) -> Result<Vec<Tensor>, Error> {
    let counts_tensor = request.input("TOKEN_COUNT")?;
    let counts = counts_tensor.as_f32()?;
    let sums = request.input("ID_SUM")?.as_i64()?;
    if counts.len() != sums.len() {
        return Err(Error::invalid_arg(format!(
            "TOKEN_COUNT has {} values but ID_SUM has {}",
            counts.len(),
            sums.len()
        )));
    }
    let mean: Vec<f32> = counts
        .iter()
        .zip(&sums)
        .map(|(&c, &s)| if c > 0.0 { s as f32 / c } else { 0.0 })
        .collect();
    let labels: Vec<&str> = counts.iter().map(|&c| label(c)).collect();
    // Same shape as the input: [batch, 1].
    let shape = counts_tensor.shape();
    Ok(vec![
        Tensor::from_f32("MEAN_ID", &shape, &mean)?,
        Tensor::from_strings("LABEL", &shape, &labels)?,
    ])
}

export_model!(fn score_and_label);
