//! `ModelStreamInfer`'s requests: each runs on its own while the stream reads on, its responses
//! (and errors, in-stream as Triton sends them) written back in order with the final flag.

use std::sync::Arc;

use tokio::sync::mpsc;
use tonic::Status;

use super::codec::{self, parse_version};
use super::tenant::Requester;
use super::{FINAL_RESPONSE, bool_param, reserved_parameters};
use crate::error::{CoreError, CoreResult};
use crate::frontend::Frontend;
use crate::infer::InferResponse;
use crate::proto::inference as pb;
use crate::trace::{activity, stamp};

/// Resolves once the server is stopping (the `Ref` that `wait_for` yields is not `Send`, so it
/// is dropped here rather than held by the caller's future).
pub(super) async fn wait_stop(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

type StreamSender = mpsc::Sender<Result<pb::ModelStreamInferResponse, Status>>;

/// An in-stream error: the request's id, model name and version, and the final flag.
fn stream_error(request: &pb::ModelInferResponse, error: &CoreError, is_final: bool) -> pb::ModelStreamInferResponse {
    let mut echo = request.clone();
    echo.parameters.insert(FINAL_RESPONSE.to_string(), bool_param(is_final));
    pb::ModelStreamInferResponse {
        error_message: crate::tenant::unmark(&error.message).into_owned(),
        infer_response: Some(echo),
    }
}

fn stream_response(response: InferResponse, is_final: bool) -> pb::ModelStreamInferResponse {
    let mut encoded = codec::encode_response(response);
    encoded.parameters.insert(FINAL_RESPONSE.to_string(), bool_param(is_final));
    pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(encoded) }
}

/// Runs one request of a `ModelStreamInfer` stream and sends its responses (or its error).
pub(super) async fn stream_request(
    frontend: Arc<Frontend>,
    caller: Arc<Requester>,
    request: pb::ModelInferRequest,
    traceparent: Option<String>,
    forwarded: Arc<CoreResult<Vec<(String, String)>>>,
    tx: StreamSender,
) {
    let echo = pb::ModelInferResponse {
        model_name: request.model_name.clone(),
        model_version: request.model_version.clone(),
        id: request.id.clone(),
        ..Default::default()
    };
    let fail = |e: CoreError| stream_error(&echo, &e, true);
    // Before the request reaches a model, Triton echoes only the id.
    let fail_early = |e: CoreError| pb::ModelStreamInferResponse {
        error_message: crate::tenant::unmark(&e.message).into_owned(),
        infer_response: Some(pb::ModelInferResponse { id: echo.id.clone(), ..Default::default() }),
    };
    // Each request of a stream is admitted on its own, against its tenant's rate and cap; it
    // holds its place until its last response is sent.
    let _admitted = match caller.identity.as_ref().map(crate::tenancy::Identity::admit) {
        Some(Err(busy)) => {
            let _ = tx.send(Ok(fail_early(CoreError::unavailable(busy.message)))).await;
            return;
        }
        Some(Ok(admitted)) => Some(admitted),
        None => None,
    };
    let prepared = (|| {
        let model = frontend.model(&caller.visible(&request.model_name), parse_version(&request.model_version)?)?;
        let empty_final = reserved_parameters(&request)?;
        // Shared-memory inputs are read here, so their errors come early too, as decoding errors do.
        let mut request = frontend.read_shm_inputs(codec::decode_request(request)?)?;
        crate::frontend::add_forwarded(&mut request, forwarded.as_ref().as_ref().map_err(Clone::clone)?);
        request.model_version = Some(model.version());
        request.principal = caller.principal.clone();
        request.trace = frontend.trace(model.name(), traceparent.as_deref());
        stamp(&request.trace, activity::GRPC_WAITREAD_START);
        stamp(&request.trace, activity::GRPC_WAITREAD_END);
        Ok::<_, CoreError>((empty_final, model, request))
    })();
    let (empty_final, model, request) = match prepared {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(Ok(fail_early(e))).await;
            return;
        }
    };
    let trace = request.trace.clone();
    if !model.is_decoupled() {
        let message = match frontend.infer(&model, request).await {
            Ok(response) => stream_response(response, true),
            Err(e) => fail(e),
        };
        stamp(&trace, activity::INFER_RESPONSE_COMPLETE);
        stamp(&trace, activity::GRPC_SEND_START);
        let _ = tx.send(Ok(message)).await;
        stamp(&trace, activity::GRPC_SEND_END);
        return;
    }
    let mut responses = match frontend.infer_stream(&model, request).await {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Ok(fail(e))).await;
            return;
        }
    };
    let mut final_sent = false;
    // An error's final flag is only known once the next item (or the end) arrives.
    let mut pending_error: Option<CoreError> = None;
    loop {
        // A client that cancels the stream drops it: the model's responses are then dropped at
        // once, which a decoupled guest sees as its request cancelled.
        let item = tokio::select! {
            item = responses.recv() => item,
            () = tx.closed() => return,
        };
        let Some(item) = item else { break };
        if let Some(e) = pending_error.take()
            && tx.send(Ok(stream_error(&echo, &e, false))).await.is_err()
        {
            return;
        }
        match item {
            Ok(response) => {
                final_sent = response.is_final;
                if tx.send(Ok(stream_response(response, final_sent))).await.is_err() {
                    return;
                }
            }
            Err(e) => pending_error = Some(e),
        }
    }
    if let Some(e) = pending_error {
        // A client that asked for the empty final response gets it after the error, as from
        // Triton; otherwise the error itself carries the final flag.
        if tx.send(Ok(stream_error(&echo, &e, !empty_final))).await.is_err() || !empty_final {
            return;
        }
    }
    if !final_sent && empty_final {
        let mut empty = echo.clone();
        empty.parameters.insert(FINAL_RESPONSE.to_string(), bool_param(true));
        let _ = tx
            .send(Ok(pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(empty) }))
            .await;
    }
}
