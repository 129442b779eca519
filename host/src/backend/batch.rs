//! Running a dynamic batch as one model call: the requests' inputs are stacked along dim 0 and
//! each request gets its own rows of the outputs back. Shared by every backend whose model takes
//! a batch dimension (ONNX Runtime today, TorchScript next).

use super::ExecRequest;
use crate::error::{CoreError, CoreResult};
use crate::tensor::{Tensor, concat_batch, split_batch};

/// Runs `batch` through `run`, one call for the whole batch: a single request runs as it is,
/// several run merged. Returns one result per request, in order.
pub fn execute_merged(
    batch: Vec<ExecRequest>,
    mut run: impl FnMut(ExecRequest) -> CoreResult<Vec<Tensor>>,
) -> Vec<CoreResult<Vec<Tensor>>> {
    if batch.len() <= 1 {
        return batch.into_iter().map(run).collect();
    }
    let n = batch.len();
    let merged = merge(&batch).and_then(|(request, rows)| {
        let wanted = request.outputs.clone();
        let outputs = run(request)?.into_iter().filter(|t| wanted.contains(&t.name)).collect();
        split(&batch, &rows, outputs)
    });
    merged.unwrap_or_else(|e| vec![Err(e); n])
}

/// The rows (dim 0 of the first input) each request contributes.
fn rows(batch: &[ExecRequest]) -> Vec<usize> {
    let rows_of = |r: &ExecRequest| r.inputs.first().and_then(|t| t.shape.first()).copied();
    batch.iter().map(|r| rows_of(r).map_or(1, |d| usize::try_from(d).unwrap_or(0))).collect()
}

/// One request whose inputs are the batch's inputs stacked along dim 0 and whose outputs are
/// every output any request asked for; also returns each request's row count.
pub fn merge(batch: &[ExecRequest]) -> CoreResult<(ExecRequest, Vec<usize>)> {
    let Some(first) = batch.first() else {
        return Err(CoreError::internal("no requests to batch"));
    };
    let mut inputs = Vec::with_capacity(first.inputs.len());
    for tensor in &first.inputs {
        let parts: Vec<&Tensor> = batch
            .iter()
            .map(|r| {
                r.inputs
                    .iter()
                    .find(|t| t.name == tensor.name)
                    .ok_or_else(|| CoreError::internal(format!("batched request lacks input '{}'", tensor.name)))
            })
            .collect::<CoreResult<_>>()?;
        inputs.push(concat_batch(&parts)?);
    }
    let mut outputs: Vec<String> = Vec::new();
    for name in batch.iter().flat_map(|r| &r.outputs) {
        if !outputs.contains(name) {
            outputs.push(name.clone());
        }
    }
    Ok((ExecRequest { inputs, outputs, ..Default::default() }, rows(batch)))
}

/// The inverse of [`merge`]: each request gets its rows of the outputs it asked for, in the
/// order it asked for them. Every tensor in `outputs` must have the merged batch's rows.
pub fn split(batch: &[ExecRequest], rows: &[usize], outputs: Vec<Tensor>) -> CoreResult<Vec<CoreResult<Vec<Tensor>>>> {
    let mut split: Vec<Vec<Tensor>> = vec![Vec::new(); batch.len()];
    for tensor in &outputs {
        for (i, part) in split_batch(tensor, rows)?.into_iter().enumerate() {
            if batch[i].outputs.contains(&tensor.name) {
                split[i].push(part);
            }
        }
    }
    Ok(batch
        .iter()
        .zip(split)
        .map(|(r, mut outs)| {
            outs.sort_by_key(|t| r.outputs.iter().position(|n| *n == t.name));
            Ok(outs)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::tensor::DataType;

    fn request(id: &str, rows: i64, fill: u8, outputs: &[&str]) -> ExecRequest {
        let data = Bytes::from(vec![fill; rows as usize * 2]);
        ExecRequest {
            id: Some(id.into()),
            inputs: vec![Tensor::new("x", DataType::Uint8, vec![rows, 2], data).unwrap()],
            outputs: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn merged_batch_runs_once_and_each_request_gets_its_rows_and_outputs() {
        let batch = vec![request("a", 1, 1, &["y", "x"]), request("b", 2, 2, &["x"])];
        let mut calls = 0;
        let results = execute_merged(batch, |merged| {
            calls += 1;
            assert_eq!(merged.inputs[0].shape, vec![3, 2]);
            assert_eq!(merged.outputs, vec!["y", "x"]);
            let x = merged.inputs[0].clone();
            let y = Tensor { name: "y".into(), ..x.clone() };
            Ok(vec![x, y])
        });
        assert_eq!(calls, 1);
        let a = results[0].as_ref().unwrap();
        assert_eq!(a.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), vec!["y", "x"]);
        assert_eq!(&a[1].data[..], &[1, 1]);
        let b = results[1].as_ref().unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].shape.clone(), &b[0].data[..]), (vec![2, 2], &[2u8, 2, 2, 2][..]));
    }

    #[test]
    fn a_failed_merged_call_fails_every_request() {
        let batch = vec![request("a", 1, 1, &["x"]), request("b", 1, 2, &["x"])];
        let results = execute_merged(batch, |_| Err(CoreError::internal("boom")));
        assert!(results.iter().all(|r| r.as_ref().is_err_and(|e| e.message == "boom")));
    }
}
