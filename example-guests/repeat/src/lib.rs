//! `repeat`: a decoupled model like Triton's repeat backend (`src/backends/repeat` in the server
//! tests): for input `IN` INT32 `[N]` it sends N responses, the i-th with `OUT` INT32 `[1]` =
//! `IN[i]` and `IDX` UINT32 `[1]` = `i`, then the final flag alone (no response). `IN` empty: just
//! the final flag. Triton's `DELAY`/`WAIT` inputs are not supported (a guest has no clock).
//!
//! Its config needs `model_transaction_policy { decoupled: true }`.

use tessera_guest::{Error, InitializeArgs, Model, Request, ResponseSender, Tensor, export_model};

struct Repeat;

fn repeat(request: &Request, sender: &ResponseSender) -> Result<(), Error> {
    let values = request.input("IN")?.as_i32()?;
    let wanted = request.requested_outputs();
    let (want_out, want_idx) = (
        wanted.iter().any(|o| o == "OUT"),
        wanted.iter().any(|o| o == "IDX"),
    );
    for (i, v) in values.iter().enumerate() {
        let mut outputs = Vec::with_capacity(2);
        if want_out {
            outputs.push(Tensor::from_i32("OUT", &[1], &[*v])?);
        }
        if want_idx {
            outputs.push(Tensor::from_u32("IDX", &[1], &[i as u32])?);
        }
        sender.send(outputs, false)?;
    }
    sender.finish()
}

impl Model for Repeat {
    fn initialize(_args: InitializeArgs) -> Result<Self, Error> {
        Ok(Repeat)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Vec<Result<Vec<Tensor>, Error>> {
        for request in &requests {
            let sender = request.sender();
            if let Err(e) = repeat(request, &sender) {
                // A sender that already failed (e.g. the client went away) cannot take the error.
                if let Err(send_error) = sender.send_error(e.clone(), true) {
                    tessera_guest::warn!(
                        "request {}: {} (and could not report it: {})",
                        request.id(),
                        e.message,
                        send_error.message
                    );
                }
            }
        }
        Vec::new() // decoupled: everything went through the senders
    }
}

export_model!(Repeat);
