//! The `request` resource of WIT interface `types`: a request's inputs, parameters and
//! requested outputs, read in batches, and the outputs given back by value or as handles.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime::component::Resource;

use super::bindings::wit;
use super::convert::{datatype_from_wit, datatype_to_wit, params_to_wit, response_params_from_wit, wit_error};
use super::resources::{HostRequest, HostSender, HostTensor};
use super::state::{TypesView, own_size, table_error};
use super::tensor::latin1_bytes;
use crate::error::{CoreError, CoreResult};
use crate::tensor::Tensor;

impl wit::HostRequest for TypesView<'_> {
    fn id(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<String> {
        Ok(self.handles.table.get(&handle).map_err(table_error)?.id.clone())
    }

    fn is_cancelled(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<bool> {
        Ok(super::sender::cancelled(&self.handles.table.get(&handle).map_err(table_error)?.responder))
    }

    fn input(&mut self, handle: Resource<HostRequest>, name: String) -> wasmtime::Result<Option<Resource<HostTensor>>> {
        let found =
            self.handles.table.get(&handle).map_err(table_error)?.inputs.iter().find(|t| t.name == name).cloned();
        found.map(|t| self.handles.new_tensor(t)).transpose()
    }

    fn inputs(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<Resource<HostTensor>>> {
        let inputs = self.handles.table.get(&handle).map_err(table_error)?.inputs.clone();
        self.handles.new_tensors(inputs)
    }

    fn read_inputs(
        &mut self,
        requests: Vec<Resource<HostRequest>>,
        max_bytes: u64,
    ) -> wasmtime::Result<Vec<Vec<wit::InputData>>> {
        each_request_once(&requests, "request.read-inputs")?;
        let mut budget = READ_INPUTS_MAX_TOTAL;
        let mut out = Vec::with_capacity(requests.len());
        for handle in &requests {
            let request = self.handles.table.get(handle).map_err(table_error)?;
            out.push(input_data(&request.inputs, max_bytes, &mut budget));
        }
        Ok(out)
    }

    fn set_outputs(
        &mut self,
        requests: Vec<Resource<HostRequest>>,
        outputs: Vec<Vec<wit::OutputData>>,
    ) -> wasmtime::Result<Vec<Result<(), wit::Error>>> {
        const CALL: &str = "request.set-outputs";
        one_list_each(&requests, outputs.len(), "outputs", CALL)?;
        let mut results = Vec::with_capacity(requests.len());
        for (handle, given) in requests.iter().zip(outputs) {
            let given = self.given_position(handle, CALL)?.and_then(|position| {
                let tensors = given.into_iter().map(output_from_wit).collect::<CoreResult<Vec<Tensor>>>()?;
                if let Some(e) = self.twice_with_given(position, tensors.iter(), CALL) {
                    return Err(e);
                }
                self.handles.hold(tensors.iter().map(|t| t.data.len() + own_size(t)).sum())?;
                Ok((position, tensors))
            });
            results.push(
                given
                    .map(|(position, tensors)| {
                        if let Some(slot) = self.call.given_outputs.as_mut().and_then(|g| g.get_mut(position)) {
                            slot.extend(tensors);
                        }
                    })
                    .map_err(wit_error),
            );
        }
        Ok(results)
    }

    fn give_tensors(
        &mut self,
        requests: Vec<Resource<HostRequest>>,
        tensors: Vec<Vec<Resource<HostTensor>>>,
    ) -> wasmtime::Result<Vec<Result<(), wit::Error>>> {
        const CALL: &str = "request.give-tensors";
        one_list_each(&requests, tensors.len(), "tensors", CALL)?;
        let mut results = Vec::with_capacity(requests.len());
        for (handle, handles) in requests.iter().zip(tensors) {
            // Every handle leaves the table, whatever becomes of the request: one given stays on
            // the guest's account until the call ends, one refused leaves it now.
            let moved = handles
                .into_iter()
                .map(|h| self.handles.table.delete(h).map_err(table_error))
                .collect::<Result<Vec<_>, _>>()?;
            let given = self.given_position(handle, CALL)?.and_then(|position| {
                match self.twice_with_given(position, moved.iter().map(|h| &h.0), CALL) {
                    Some(e) => Err(e),
                    None => Ok(position),
                }
            });
            let slot = given.as_ref().ok().and_then(|&p| self.call.given_tensors.as_mut()?.get_mut(p));
            match (slot, given) {
                (Some(slot), Ok(_)) => {
                    slot.extend(moved);
                    results.push(Ok(()));
                }
                (_, given) => {
                    for held in moved {
                        self.handles.discharge(held);
                    }
                    let e = given.err().unwrap_or_else(|| CoreError::internal(format!("{CALL}: no such request")));
                    results.push(Err(wit_error(e)));
                }
            }
        }
        Ok(results)
    }

    fn at(&mut self, position: u32) -> wasmtime::Result<Option<Resource<HostRequest>>> {
        let Some(request) = self.call.pending_requests.get_mut(position as usize).and_then(Option::take) else {
            return Ok(None);
        };
        let handle = self.handles.table.push(request).map_err(table_error)?;
        self.call.taken_requests.push(handle.rep());
        Ok(Some(handle))
    }

    fn requested_outputs(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<String>> {
        Ok(self.handles.table.get(&handle).map_err(table_error)?.outputs.clone())
    }

    fn parameters(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Vec<wit::Parameter>> {
        Ok(params_to_wit(&self.handles.table.get(&handle).map_err(table_error)?.parameters))
    }

    fn sender(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<Resource<HostSender>> {
        let responder = Arc::clone(&self.handles.table.get(&handle).map_err(table_error)?.responder);
        self.handles.table.push(HostSender(responder)).map_err(table_error)
    }

    fn set_response_parameters(
        &mut self,
        handle: Resource<HostRequest>,
        parameters: Vec<wit::Parameter>,
    ) -> wasmtime::Result<Result<(), wit::Error>> {
        const CALL: &str = "request.set-response-parameters";
        let checked = self.given_position(&handle, CALL)?.and_then(|_| response_params_from_wit(parameters));
        let parameters = match checked {
            Ok(parameters) => parameters,
            Err(e) => return Ok(Err(wit_error(e))),
        };
        if let Some(slot) = &self.handles.table.get(&handle).map_err(table_error)?.response_parameters {
            slot.set(parameters);
        }
        Ok(Ok(()))
    }

    fn drop(&mut self, handle: Resource<HostRequest>) -> wasmtime::Result<()> {
        self.handles.table.delete(handle).map(|_| ()).map_err(table_error)
    }
}

/// Traps a batch call that names a request twice: a guest repeating a handle would make the host
/// copy (or hold) without bound, in host memory, where the guest's memory cap does not reach.
fn each_request_once(requests: &[Resource<HostRequest>], call: &str) -> wasmtime::Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(requests.len());
    if requests.iter().all(|r| seen.insert(r.rep())) {
        return Ok(());
    }
    Err(wasmtime::Error::msg(format!("{call}: the same request handle was passed twice")))
}

/// Traps a batch call whose lists (of `what`) do not match its requests one to one, or that names
/// a request twice ([`each_request_once`]): both are the guest's bugs.
fn one_list_each(requests: &[Resource<HostRequest>], lists: usize, what: &str, call: &str) -> wasmtime::Result<()> {
    if requests.len() != lists {
        return Err(wasmtime::Error::msg(format!("{call}: {} requests but {lists} lists of {what}", requests.len())));
    }
    each_request_once(requests, call)
}

/// The most input bytes one `request.read-inputs` call copies into the guest; inputs past it
/// come without their bytes (the guest reads them through `request.input`), so a batch of many
/// small inputs cannot take a guest's memory in one call.
pub(super) const READ_INPUTS_MAX_TOTAL: usize = 1 << 20;

/// The most bytes of one input `execute-by-value` passes with the call (as `request.read-inputs`
/// with a `max-bytes` of 4 KiB); larger ones come without their bytes.
pub(super) const BY_VALUE_INPUT_BYTES: u64 = 4 << 10;

/// Whether an input of `size` bytes goes to the guest with its bytes: at most `max_bytes`, and
/// while `budget` (bytes of the whole call, [`READ_INPUTS_MAX_TOTAL`]) lasts, which it then takes.
pub(super) fn copied_within(size: usize, max_bytes: u64, budget: &mut usize) -> bool {
    let copy = size as u64 <= max_bytes && size <= *budget;
    if copy {
        *budget -= size;
    }
    copy
}

/// A request's inputs as `input-data` records: each with its bytes if [`copied_within`], the
/// others without.
fn input_data(inputs: &[Tensor], max_bytes: u64, budget: &mut usize) -> Vec<wit::InputData> {
    inputs
        .iter()
        .map(|t| {
            let copy = copied_within(t.data.len(), max_bytes, budget);
            wit::InputData {
                name: t.name.clone(),
                datatype: datatype_to_wit(t.datatype),
                shape: t.shape.clone(),
                data: copy.then(|| t.data.to_vec()),
            }
        })
        .collect()
}

/// An output given by value with `request.set-outputs`, checked as `tensor.create-latin1` checks.
fn output_from_wit(output: wit::OutputData) -> CoreResult<Tensor> {
    let (name, datatype, shape, data_latin1) = output;
    let Some(bytes) = latin1_bytes(&data_latin1) else {
        return Err(CoreError::invalid_arg(format!(
            "output '{name}': its data holds a character above U+00FF, which is not one byte"
        )));
    };
    Tensor::new_as("output", name, datatype_from_wit(datatype), shape, Bytes::from(bytes))
}
