//! bls_add_sub: one BLS call to `add_sub` per request, its outputs passed through; the twin of
//! the reference Triton's python `bls_add_sub`. Its server-side request time minus `add_sub`'s is
//! the cost of one BLS hop (bench/perf.sh measures it).
//!
//! The inputs go to `add_sub` as the handles they arrived as, and `add_sub`'s outputs come back
//! as handles: no tensor byte enters the guest's memory.

use tessera_guest::{Error, Request, Tensor, export_model, infer};

fn bls_add_sub(request: &Request) -> Result<Vec<Tensor>, Error> {
    let in0 = request.input("INPUT0")?;
    let in1 = request.input("INPUT1")?;
    let wanted = request.requested_outputs();
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    infer("add_sub", &[&in0, &in1], &wanted).map_err(|e| e.context("BLS call to 'add_sub'"))
}

export_model!(fn bls_add_sub);
