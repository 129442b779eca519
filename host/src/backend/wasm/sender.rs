//! The `response-sender` resource of WIT interface `types`: a decoupled request's responses.

use wasmtime::component::Resource;

use super::bindings::wit;
use super::convert::{kind_from_wit, response_params_from_wit, wit_error};
use super::outlet::{Outlet, SendDeadline};
use super::resources::{HostSender, HostTensor, SharedResponder};
use super::state::{TypesView, table_error};
use crate::backend::Sent;
use crate::error::{CoreError, CoreResult};
use crate::infer::{Parameters, RESPONSE_BUFFER};
use crate::tensor::Tensor;

impl wit::HostResponseSender for TypesView<'_> {
    fn send(
        &mut self,
        handle: Resource<HostSender>,
        outputs: Vec<Resource<HostTensor>>,
        final_: bool,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        self.send_with_parameters(handle, outputs, Vec::new(), final_)
    }

    fn send_with_parameters(
        &mut self,
        handle: Resource<HostSender>,
        outputs: Vec<Resource<HostTensor>>,
        parameters: Vec<wit::Parameter>,
        final_: bool,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let mut tensors = Vec::with_capacity(outputs.len());
        for t in outputs {
            tensors.push(self.handles.take_tensor(t)?);
        }
        // Refused parameters refuse the send (its tensors were taken: they are dropped).
        let parameters = match response_params_from_wit(parameters) {
            Ok(parameters) => parameters,
            Err(e) => return Ok(Err(wit_error(e))),
        };
        let limits = self.send_limits();
        let sender = self.handles.table.get_mut(&handle).map_err(table_error)?;
        Ok(send_on(sender, Ok(tensors), parameters, final_, limits))
    }

    fn send_error(
        &mut self,
        handle: Resource<HostSender>,
        error: wit::Error,
        final_: bool,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        let limits = self.send_limits();
        let sender = self.handles.table.get_mut(&handle).map_err(table_error)?;
        let error = CoreError::new(kind_from_wit(error.code), error.message);
        Ok(send_on(sender, Err(error), Parameters::new(), final_, limits))
    }

    fn is_cancelled(&mut self, handle: Resource<HostSender>) -> wasmtime::Result<bool> {
        let sender = self.handles.table.get(&handle).map_err(table_error)?;
        Ok(cancelled(&sender.0))
    }

    fn drop(&mut self, handle: Resource<HostSender>) -> wasmtime::Result<()> {
        self.handles.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

/// Whether the caller of the request behind `responder` has gone (false once it is closed by a
/// final response, or for a model that is not decoupled).
pub(super) fn cancelled(responder: &SharedResponder) -> bool {
    responder.lock().ok().and_then(|slot| slot.as_ref().map(Outlet::is_cancelled)).unwrap_or(false)
}

impl TypesView<'_> {
    /// How long a send may wait for its reader, and how many bytes of one request's responses
    /// the server may buffer for it (`max_memory_bytes`; see [`Outlet`]).
    fn send_limits(&self) -> (SendDeadline, usize) {
        (self.call.deadline.zip(self.shared.runtime.clone()), self.handles.max_memory())
    }
}

fn send_on(
    sender: &mut HostSender,
    item: CoreResult<Vec<Tensor>>,
    parameters: Parameters,
    final_: bool,
    (until, budget): (SendDeadline, usize),
) -> Result<(), wit::Error> {
    let Ok(mut slot) = sender.0.lock() else {
        return Err(wit_error(CoreError::internal("response sender state is poisoned")));
    };
    let Some(outlet) = slot.as_ref() else {
        return Err(wit_error(CoreError::unavailable(
            "no more responses can be sent for this request \
             (the final response was sent, or the model is not decoupled)",
        )));
    };
    if outlet.is_cancelled() {
        // Nothing reads the responses: say so, so that the guest stops producing them. (The
        // outlet stays, so `is-cancelled` keeps answering true.)
        return Err(wit_error(CoreError::new(
            crate::error::ErrorKind::Cancelled,
            "the request was cancelled (its caller has gone): no more responses can be sent",
        )));
    }
    // An empty final response only carries the final flag (as Triton's repeat sends it).
    let flag_only = final_ && parameters.is_empty() && matches!(&item, Ok(outputs) if outputs.is_empty());
    if !flag_only {
        // A gone receiver means the caller stopped listening; that is not the guest's error.
        // Waits while the caller's buffer is full (the guest runs on a blocking thread), up to
        // the execution's deadline: a caller that does not read cannot hold the instance longer.
        if outlet.send(item, parameters, final_, budget, &until) == Sent::TimedOut {
            let error = CoreError::unavailable(format!(
                "the caller of this request has not read its responses ({RESPONSE_BUFFER} are waiting, or \
                 max_memory_bytes of them) within the model's time limit (max_execute_ms); the request is closed \
                 and this response dropped"
            ));
            // The request ends after what it buffered, with this error as its final response
            // once the caller reads again; the guest is free at once.
            if let (Some(outlet), Some((_, runtime))) = (slot.take(), until) {
                outlet.fail_when_read(error.clone(), &runtime);
            }
            return Err(wit_error(error));
        }
    }
    if final_ {
        *slot = None;
    }
    Ok(())
}
