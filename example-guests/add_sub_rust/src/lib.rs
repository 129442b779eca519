//! add_sub in Rust: `OUTPUT0 = INPUT0 + INPUT1`, `OUTPUT1 = INPUT0 - INPUT1`, element-wise, FP32.
//!
//! Any shape works (with or without a batch dimension) as long as both inputs have the same one;
//! the outputs take it. Only the outputs the request asks for are computed.

use tessera_guest::{Error, Request, Tensor, export_model};

fn add_sub(request: &Request) -> Result<Vec<Tensor>, Error> {
    let in0 = request.input("INPUT0")?;
    let in1 = request.input("INPUT1")?;
    // Reading the data first costs one host call per input: the shape comes with it.
    let a = in0.as_f32()?;
    let b = in1.as_f32()?;
    let shape = in0.shape();
    if in1.shape() != shape {
        return Err(Error::invalid_arg(format!(
            "INPUT0 and INPUT1 must have the same shape, got {:?} and {:?}",
            shape,
            in1.shape()
        )));
    }

    let mut outputs = Vec::with_capacity(2);
    for name in request.requested_outputs() {
        let values: Vec<f32> = match name.as_str() {
            "OUTPUT0" => a.iter().zip(&b).map(|(x, y)| x + y).collect(),
            "OUTPUT1" => a.iter().zip(&b).map(|(x, y)| x - y).collect(),
            other => return Err(Error::invalid_arg(format!("unknown output '{other}'"))),
        };
        outputs.push(Tensor::from_f32(&name, &shape, &values)?);
    }
    Ok(outputs)
}

export_model!(fn add_sub);
