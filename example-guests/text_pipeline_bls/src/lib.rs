//! The quickstart `text_pipeline` ensemble (tokenizer -> text_scorer -> score_label) written as
//! business logic (BLS), with the same inputs and outputs: `TEXT` BYTES `[batch, 1]` in;
//! `TOKEN_COUNT` FP32, `MEAN_ID` FP32 and `LABEL` BYTES, each `[batch, 1]`, out.
//!
//! The requests of one `execute` batch are independent, so each stage starts the calls of every
//! request with `infer_async` and then waits for them: the host runs them concurrently (and the
//! called models' dynamic batchers may merge them). Tensors go from one call to the next as host
//! handles, without copies through the guest.

use tessera_guest::{
    Error, InitializeArgs, Model, PendingInfer, Request, Tensor, TensorsExt, export_model,
    infer_async,
};

struct Pipeline;

/// Starts one call per request (skipping requests that already failed) and waits for them all.
fn stage(
    model: &str,
    states: Vec<Result<Vec<Tensor>, Error>>,
    outputs: &[&str],
) -> Vec<Result<Vec<Tensor>, Error>> {
    let started: Vec<Result<PendingInfer, Error>> = states
        .iter()
        .map(|state| match state {
            Ok(inputs) => infer_async(model, &inputs.iter().collect::<Vec<_>>(), outputs),
            Err(e) => Err(e.clone()),
        })
        .collect();
    started
        .into_iter()
        .map(|call| call.and_then(PendingInfer::get).map_err(|e| e.context(format!("BLS call to '{model}'"))))
        .collect()
}

impl Model for Pipeline {
    fn initialize(_args: InitializeArgs) -> Result<Self, Error> {
        Ok(Pipeline)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Vec<Result<Vec<Tensor>, Error>> {
        let texts = requests.iter().map(|r| r.input("TEXT").map(|t| vec![t])).collect();
        let tokens = stage("tokenizer", texts, &["INPUT_IDS", "ATTENTION_MASK"]);
        let scores = stage("text_scorer", tokens, &["TOKEN_COUNT", "ID_SUM"]);
        // TOKEN_COUNT goes to score_label and into the response: a second handle, no copy.
        let mut counts: Vec<Option<Tensor>> = Vec::with_capacity(scores.len());
        let mut for_labels = Vec::with_capacity(scores.len());
        for score in scores {
            match score.and_then(|mut outputs| {
                let count = outputs.take_named("TOKEN_COUNT")?;
                let id_sum = outputs.take_named("ID_SUM")?;
                Ok((count, id_sum))
            }) {
                Ok((count, id_sum)) => {
                    for_labels.push(Ok(vec![count.with_name("TOKEN_COUNT"), id_sum]));
                    counts.push(Some(count));
                }
                Err(e) => {
                    for_labels.push(Err(e));
                    counts.push(None);
                }
            }
        }
        let labels = stage("score_label", for_labels, &["MEAN_ID", "LABEL"]);
        labels
            .into_iter()
            .zip(counts)
            .map(|(result, count)| {
                let mut outputs = result?;
                let count = count.ok_or_else(|| Error::internal("text_scorer returned no TOKEN_COUNT"))?;
                Ok(vec![count, outputs.take_named("MEAN_ID")?, outputs.take_named("LABEL")?])
            })
            .collect()
    }
}

export_model!(Pipeline);
