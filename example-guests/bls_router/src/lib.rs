//! A BLS router: classifies its input with one model, then routes it to another.
//!
//! Input `INPUT0`: FP32 `[4]` (or `[1, 4]`). Outputs: `ROUTED_OUTPUT` FP32 `[16]` and `ROUTE`
//! BYTES `[1]` (the name of the model that produced `ROUTED_OUTPUT`).
//!
//! 1. BLS call to `classifier` (FP32 `[batch, 4]` -> `OUTPUT0` `[batch, 5]` logits) with INPUT0 as
//!    a batch of one. `class` = argmax of the 5 logits (the first one wins ties).
//! 2. `x16` = INPUT0 tiled four times (16 values).
//!    * `class` even (0, 2, 4): BLS call to `add_sub` (FP32 `[batch, 16]`) with `x16` as both
//!      INPUT0 and INPUT1; `ROUTED_OUTPUT` = its OUTPUT0 (the sum, `2 * x16`); `ROUTE` = `add_sub`.
//!    * `class` odd (1, 3): BLS call to `simple` (INT32 `[batch, 16]`) with `x16` rounded to INT32
//!      as both inputs; `ROUTED_OUTPUT` = its OUTPUT0 converted to FP32; `ROUTE` = `simple`.
//!
//! With the quickstart classifier (logits `[x0, x1, x2, x3, 0.5]`): `[4, 3, 2, 1]` -> class 0
//! -> add_sub; `[-1, 7, 2, 0]` -> class 1 -> simple; `[0, 0, 0, 0]` -> class 4 -> add_sub.
//!
//! Bytes are copied only where a shape or datatype has to change: a tensor that already has the
//! right shape is handed on as a handle (`with_name`), so INPUT0 `[1, 4]` goes to the classifier
//! without a copy, and the same `x16` tensor is passed as both INPUT0 and INPUT1.
//!
//! The model's config must allow the calls: `parameters { key: "allowed_models" value:
//! { string_value: "classifier,add_sub,simple" } }`.

use tessera_guest::{Error, Request, Tensor, TensorsExt, export_model, infer};

/// The tensor as a batch of one (`[1, ...]`) named `name`: a handle when it already is one, a copy
/// with the extra dimension otherwise.
fn batch_of_one(t: &Tensor, name: &str, values: &[f32]) -> Result<Tensor, Error> {
    let shape = t.shape();
    if shape.first() == Some(&1) && shape.len() == 2 {
        Ok(t.with_name(name))
    } else {
        Tensor::from_f32(name, &[1, values.len() as i64], values)
    }
}

fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}

fn route(request: &Request) -> Result<Vec<Tensor>, Error> {
    let input = request.input("INPUT0")?;
    let x = input.as_f32()?;
    if x.len() != 4 {
        return Err(Error::invalid_arg(format!(
            "INPUT0 must hold 4 values, got {}",
            x.len()
        )));
    }

    let class_input = batch_of_one(&input, "INPUT0", &x)?;
    let mut scores = infer("classifier", &[&class_input], &["OUTPUT0"])
        .map_err(|e| e.context("BLS call to 'classifier'"))?;
    let logits = scores.take_named("OUTPUT0")?.as_f32()?;
    if logits.len() != 5 {
        return Err(Error::internal(format!(
            "classifier returned {} logits, expected 5",
            logits.len()
        )));
    }
    let class = argmax(&logits);
    tessera_guest::verbose!("request {}: class {class}", request.id());

    let x16: Vec<f32> = x.iter().copied().cycle().take(16).collect();
    let (route, routed): (&str, Vec<f32>) = if class.is_multiple_of(2) {
        let a = Tensor::from_f32("INPUT0", &[1, 16], &x16)?;
        let b = a.with_name("INPUT1"); // same host bytes, no copy
        let mut out = infer("add_sub", &[&a, &b], &["OUTPUT0"])
            .map_err(|e| e.context("BLS call to 'add_sub'"))?;
        let sum = out.take_named("OUTPUT0")?;
        if sum.shape() == [16] {
            // Already the right shape: hand the host tensor on as it is.
            return respond(request, sum.with_name("ROUTED_OUTPUT"), "add_sub");
        }
        ("add_sub", sum.as_f32()?)
    } else {
        let ints: Vec<i32> = x16.iter().map(|v| v.round() as i32).collect();
        let a = Tensor::from_i32("INPUT0", &[1, 16], &ints)?;
        let b = a.with_name("INPUT1");
        let mut out = infer("simple", &[&a, &b], &["OUTPUT0"])
            .map_err(|e| e.context("BLS call to 'simple'"))?;
        let sum = out.take_named("OUTPUT0")?.as_i32()?;
        ("simple", sum.iter().map(|&v| v as f32).collect())
    };
    if routed.len() != 16 {
        return Err(Error::internal(format!(
            "{route} returned {} values, expected 16",
            routed.len()
        )));
    }
    respond(
        request,
        Tensor::from_f32("ROUTED_OUTPUT", &[16], &routed)?,
        route,
    )
}

/// The outputs the caller asked for.
fn respond(request: &Request, routed: Tensor, route: &str) -> Result<Vec<Tensor>, Error> {
    let wanted = request.requested_outputs();
    let mut outputs = Vec::with_capacity(2);
    if wanted.iter().any(|o| o == "ROUTED_OUTPUT") {
        outputs.push(routed);
    }
    if wanted.iter().any(|o| o == "ROUTE") {
        outputs.push(Tensor::from_strings("ROUTE", &[1], &[route])?);
    }
    Ok(outputs)
}

export_model!(fn route);
