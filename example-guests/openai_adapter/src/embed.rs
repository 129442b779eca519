//! Embeddings: every input tokenized (or taken as the token ids the caller gave), sorted by length
//! and padded into batches of 32, a BLS call of the encoder per batch, then mean pooling over each
//! input's tokens and L2 normalisation, as sentence-transformers' `Pooling` (mean) and `Normalize` modules compute them.

use tessera_guest::{Error, ResponseSender, Tensor, TensorsExt, infer};
use tokenizers::Tokenizer;

use crate::protocol::{Call, Text};

/// Inputs per BLS call.
const BATCH: usize = 32;

/// One BLS call for `rows` (padded to the longest with id 0, which the attention mask hides), and
/// each row's pooled, normalised vector.
fn encode(call: &Call, rows: &[&[u32]]) -> Result<Vec<Vec<f32>>, Error> {
    let (n, width) = (rows.len(), rows.iter().map(|r| r.len()).max().unwrap_or(0));
    let mut ids = vec![0i64; n * width];
    let mut mask = vec![0i64; n * width];
    for (r, row) in rows.iter().enumerate() {
        for (c, &id) in row.iter().enumerate() {
            ids[r * width + c] = i64::from(id);
            mask[r * width + c] = 1;
        }
    }
    let shape = [n as i64, width as i64];
    let inputs = [
        Tensor::from_i64("input_ids", &shape, &ids)?,
        Tensor::from_i64("attention_mask", &shape, &mask)?,
        Tensor::from_i64("token_type_ids", &shape, &vec![0; n * width])?,
    ];
    let hidden = infer(&call.model, &inputs.iter().collect::<Vec<_>>(), &["last_hidden_state"])?
        .take_named("last_hidden_state")?;
    let dims = hidden.shape();
    let values = hidden.as_f32()?;
    let depth = match dims.as_slice() {
        [a, b, d] if *a == n as i64 && *b == width as i64 && *d > 0 => *d as usize,
        _ => {
            return Err(Error::internal(format!("model '{}' answered last_hidden_state of shape {dims:?}", call.model)));
        }
    };
    Ok(rows
        .iter()
        .enumerate()
        .map(|(r, row)| {
            let mut sum = vec![0f32; depth];
            for c in 0..row.len() {
                let at = (r * width + c) * depth;
                for (s, v) in sum.iter_mut().zip(&values[at..at + depth]) {
                    *s += v;
                }
            }
            let count = row.len() as f32;
            let mean: Vec<f32> = sum.iter().map(|s| s / count).collect();
            let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            mean.iter().map(|v| v / norm).collect()
        })
        .collect())
}

pub fn run(tokenizer: &Tokenizer, call: &Call, sender: &ResponseSender) -> Result<(), Error> {
    if call.input.is_empty() {
        return Err(Error::invalid_arg("'input' holds no text"));
    }
    let mut rows: Vec<Vec<u32>> = Vec::with_capacity(call.input.len());
    for (i, input) in call.input.iter().enumerate() {
        let ids = match input {
            Text::Text(text) => tokenizer
                .encode(text.as_str(), true)
                .map_err(|e| Error::invalid_arg(format!("tokenizing input {i}: {e}")))?
                .get_ids()
                .to_vec(),
            Text::Tokens(ids) => ids.clone(),
        };
        if ids.is_empty() {
            return Err(Error::invalid_arg(format!("input {i} holds no tokens")));
        }
        crate::known_ids(tokenizer, &ids).map_err(|e| e.context(format!("input {i}")))?;
        if let Some(context) = call.context_length
            && ids.len() > context as usize
        {
            return Err(Error::invalid_arg(format!(
                "This model's maximum context length is {context} tokens, however you requested {} tokens \
                 in input {i}. Please reduce your input.",
                ids.len()
            )));
        }
        rows.push(ids);
    }
    // As sentence-transformers batches: inputs by length, a BLS call per 32, so that short
    // inputs are not padded to the longest of the call.
    let n = rows.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| rows[i].len());
    let mut pooled: Vec<Vec<f32>> = vec![Vec::new(); n];
    for chunk in order.chunks(BATCH) {
        let batch: Vec<&[u32]> = chunk.iter().map(|&i| rows[i].as_slice()).collect();
        for (&i, vector) in chunk.iter().zip(encode(call, &batch)?) {
            pooled[i] = vector;
        }
    }
    let depth = pooled[0].len();
    let out: Vec<f32> = pooled.concat();
    let tokens: usize = rows.iter().map(Vec::len).sum();
    sender.send(
        vec![
            Tensor::from_f32("embedding", &[n as i64, depth as i64], &out)?,
            Tensor::from_i32("num_input_tokens", &[1], &[tokens as i32])?,
        ],
        true,
    )
}
