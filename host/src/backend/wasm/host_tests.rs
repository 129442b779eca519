//! The host side of every WIT interface of `types` and `host` against one guest state: tensors,
//! requests, response senders, logging and BLS entry points.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use wit::{HostRequest as _, HostResponseSender as _, HostTensor as _};
use wit_host::Host as _;

use super::*;
use crate::backend::wasm::outlet::Outlet;
use crate::backend::wasm::request::READ_INPUTS_MAX_TOTAL;
use crate::backend::wasm::resources::{HostRequest, SharedResponder};
use crate::backend::wasm::sandbox::AllowList;
use crate::backend::wasm::state::GuestState;
use crate::backend::wasm::tensor::latin1_bytes;
use crate::backend::wasm::test_support::{shared, state};
use crate::infer::Parameters;
use crate::tensor::{DataType, Tensor};

fn request(
    state: &mut GuestState,
    responder: Option<crate::backend::Responder>,
) -> (Resource<HostRequest>, SharedResponder) {
    let responder: SharedResponder = Arc::new(Mutex::new(responder.map(Outlet::new)));
    let input =
        Tensor::new("IN", DataType::Int32, vec![2], Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0])).expect("tensor");
    let handle = state
        .handles
        .table
        .push(HostRequest {
            id: "req-1".into(),
            inputs: vec![input],
            outputs: vec!["OUT".into()],
            parameters: Parameters::from([("k".into(), crate::infer::ParamValue::Int(3))]),
            responder: Arc::clone(&responder),
            response_parameters: None,
            call: state.call.number,
            position: 0,
        })
        .expect("push request");
    (handle, responder)
}

#[test]
fn tensors() {
    let mut s = state(shared(AllowList::Nothing, None));
    let t =
        s.types().create("X".into(), wit::DataType::Uint8, vec![3], vec![1, 2, 3]).expect("no trap").expect("valid");
    assert_eq!(s.types().name(Resource::new_borrow(t.rep())).expect("name"), "X");
    assert_eq!(s.types().datatype(Resource::new_borrow(t.rep())).expect("datatype"), wit::DataType::Uint8);
    assert_eq!(s.types().shape(Resource::new_borrow(t.rep())).expect("shape"), vec![3]);
    assert_eq!(s.types().byte_size(Resource::new_borrow(t.rep())).expect("size"), 3);
    assert_eq!(s.types().data(Resource::new_borrow(t.rep())).expect("data"), vec![1, 2, 3]);
    let renamed = s.types().with_name(Resource::new_borrow(t.rep()), "Y".into()).expect("renamed");
    assert_eq!(s.handles.tensor(&renamed).expect("renamed tensor").name, "Y");
    assert_eq!(s.handles.tensor(&t).expect("original").name, "X", "renaming makes a new tensor");
    // Data that does not fit the shape is the guest's error, not a trap.
    let bad = s.types().create("X".into(), wit::DataType::Int32, vec![2], vec![0; 3]).expect("no trap");
    assert!(bad.is_err());
    wit::HostTensor::drop(&mut s.types(), t).expect("drop");
    wit::HostTensor::drop(&mut s.types(), renamed).expect("drop");
    assert!(s.handles.table.is_empty());
}

#[test]
fn read_inputs_copies_small_inputs_of_each_request_once() {
    let mut s = state(shared(AllowList::Nothing, None));
    let (a, _) = request(&mut s, None);
    let (b, _) = request(&mut s, None);
    let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
    let read = s.types().read_inputs(vec![borrow(&a), borrow(&b)], 8).expect("no trap");
    assert_eq!(read.len(), 2, "one list per request, in order");
    for inputs in &read {
        assert_eq!(inputs.len(), 1);
        let input = &inputs[0];
        assert_eq!(
            (input.name.as_str(), input.datatype, input.shape.as_slice()),
            ("IN", wit::DataType::Int32, &[2][..])
        );
        assert_eq!(input.data.as_deref(), Some(&[1u8, 0, 0, 0, 2, 0, 0, 0][..]));
    }
    // Above max-bytes an input comes without its bytes (the guest reads it as a handle).
    let read = s.types().read_inputs(vec![borrow(&a)], 7).expect("no trap");
    assert!(read[0][0].data.is_none());
    // The same request twice would let a guest make the host copy without bound: a trap.
    let twice = s.types().read_inputs(vec![borrow(&a), borrow(&a)], 8);
    assert!(twice.is_err_and(|e| e.to_string().contains("passed twice")));
}

#[test]
fn read_inputs_copies_at_most_its_budget_per_call() {
    let mut s = state(shared(AllowList::Nothing, None));
    let size = READ_INPUTS_MAX_TOTAL / 3 + 1;
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let input =
                Tensor::new("IN", DataType::Uint8, vec![size as i64], Bytes::from(vec![i; size])).expect("tensor");
            s.handles
                .table
                .push(HostRequest {
                    id: format!("r{i}"),
                    inputs: vec![input],
                    outputs: Vec::new(),
                    parameters: Parameters::default(),
                    responder: Arc::new(Mutex::new(None)),
                    response_parameters: None,
                    call: 0,
                    position: usize::from(i),
                })
                .expect("push request")
        })
        .collect();
    let borrows = handles.iter().map(|r| Resource::<HostRequest>::new_borrow(r.rep())).collect();
    let read = s.types().read_inputs(borrows, u64::MAX).expect("no trap");
    let copied: Vec<bool> = read.iter().map(|inputs| inputs[0].data.is_some()).collect();
    assert_eq!(copied, vec![true, true, false], "the third input would pass the per-call budget");
    assert_eq!(read[1][0].data.as_ref().map(Vec::len), Some(size));
}

/// A request without inputs of `execute` call `call`, at `position` in its batch.
fn host_request(call: u64, position: usize) -> HostRequest {
    HostRequest {
        id: format!("r{position}"),
        inputs: Vec::new(),
        outputs: Vec::new(),
        parameters: Parameters::default(),
        responder: Arc::new(Mutex::new(None)),
        response_parameters: None,
        call,
        position,
    }
}

/// A request of the current `execute` call at `position`.
fn request_at(state: &mut GuestState, call: u64, position: usize) -> Resource<HostRequest> {
    state.handles.table.push(host_request(call, position)).expect("push request")
}

fn output(name: &str, data: &str) -> wit::OutputData {
    let shape = vec![data.chars().count() as i64];
    (name.into(), wit::DataType::Uint8, shape, data.into())
}

#[test]
fn set_outputs_gives_each_request_of_the_call_its_outputs() {
    let mut s = state(shared(AllowList::Nothing, None));
    let call = s.begin_execute(2, false);
    let (a, b) = (request_at(&mut s, call, 0), request_at(&mut s, call, 1));
    let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
    // Out of order, a byte above 0x7f, and a bad output that fails only its own request.
    let results = s
        .types()
        .set_outputs(vec![borrow(&b), borrow(&a)], vec![vec![output("Y", "\u{ff}\u{1}")], vec![output("X", "ab")]])
        .expect("no trap");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut bad = output("Z", "abc");
    bad.2 = vec![2];
    let results = s.types().set_outputs(vec![borrow(&a)], vec![vec![output("X2", "c"), bad]]).expect("no trap");
    let message = results[0].as_ref().map_err(|e| e.message.clone()).expect_err("Z does not fit");
    assert_eq!(message, "output byte size mismatch for output 'Z'. Expected 2, got 3");
    let given = s.end_execute();
    let names = |ts: &Vec<Tensor>| ts.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&given[0]), vec!["X"], "a failed call gives that request nothing");
    assert_eq!(names(&given[1]), vec!["Y"]);
    assert_eq!(&given[1][0].data[..], &[0xff, 0x01], "each character is one byte");
    assert_eq!(&given[0][0].data[..], b"ab");
}

#[test]
fn give_tensors_moves_handles_after_the_outputs_given_by_value() {
    let mut s = state(shared(AllowList::Nothing, None));
    let call = s.begin_execute(2, false);
    let (a, b) = (request_at(&mut s, call, 0), request_at(&mut s, call, 1));
    let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
    let made = |s: &mut GuestState, name: &str| {
        wit::HostTensor::create(&mut s.types(), name.into(), wit::DataType::Uint8, vec![2], b"xy".to_vec())
            .expect("no trap")
            .expect("created")
    };
    let results = s.types().set_outputs(vec![borrow(&a)], vec![vec![output("V", "v")]]).expect("no trap");
    assert!(results[0].is_ok());
    let held = s.handles.held_bytes;
    let h2 = made(&mut s, "H2");
    let one = s.handles.held_bytes - held;
    let (h1, h3) = (made(&mut s, "H1"), made(&mut s, "V"));
    let reps = [h1.rep(), h2.rep(), h3.rep()];
    assert!(one > 0, "created tensors are on the guest's account");
    let results = s.types().give_tensors(vec![borrow(&a), borrow(&b)], vec![vec![h1, h3], vec![h2]]).expect("no trap");
    // a name given twice (V, by value and as a handle) fails that request only
    let message = results[0].as_ref().map_err(|e| e.message.clone()).expect_err("V twice");
    assert_eq!(message, "request.give-tensors: output 'V' given twice for one request");
    assert!(results[1].is_ok());
    // H2 stays on the guest's account until the call ends (a guest giving one buffer again
    // and again must meet the limit); the refused H1 and V left it at once
    assert_eq!(s.handles.held_bytes, held + one);
    for rep in reps {
        assert!(s.handles.tensor(&Resource::new_borrow(rep)).is_err(), "the handle left the table");
    }
    let given = s.end_execute();
    let names = |ts: &Vec<Tensor>| ts.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&given[0]), vec!["V"], "the refused handles were not given");
    assert_eq!(names(&given[1]), vec!["H2"]);
    assert_eq!(s.handles.held_bytes, 0);
    // Outside the call, and for a decoupled model, a request gets an error; the handle still moves.
    let h = made(&mut s, "H");
    let results = s.types().give_tensors(vec![borrow(&a)], vec![vec![h]]).expect("no trap");
    assert!(results[0].as_ref().is_err_and(|e| e.message.contains("not one of the current")));
    let call = s.begin_execute(1, true);
    let r = request_at(&mut s, call, 0);
    let h = made(&mut s, "H");
    let results = s.types().give_tensors(vec![borrow(&r)], vec![vec![h]]).expect("no trap");
    assert!(results[0].as_ref().is_err_and(|e| e.message.contains("decoupled")));
    assert_eq!(s.handles.held_bytes, 0);
    // Guest bugs trap: lists of different lengths, a request twice.
    s.begin_execute(1, false);
    assert!(s.types().give_tensors(vec![borrow(&r)], Vec::new()).is_err());
    let twice = s.types().give_tensors(vec![borrow(&r), borrow(&r)], vec![Vec::new(), Vec::new()]);
    assert!(twice.is_err_and(|e| e.to_string().contains("passed twice")));
}

#[test]
fn tensors_given_stay_on_the_guests_account_until_the_call_ends() {
    // A guest that copies one buffer out again and again and gives each copy away must meet
    // the held-bytes limit (4 x its 1 MiB here) within the call, not grow the server.
    let mut s = state(shared(AllowList::Nothing, None));
    let call = s.begin_execute(1, false);
    let r = request_at(&mut s, call, 0);
    let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
    let chunk = vec![7u8; 64 << 10];
    let mut given = 0;
    let refused = loop {
        let created = wit::HostTensor::create(
            &mut s.types(),
            format!("T{given}"),
            wit::DataType::Uint8,
            vec![64 << 10],
            chunk.clone(),
        )
        .expect("no trap");
        let h = match created {
            Ok(h) => h,
            Err(e) => break e,
        };
        let results = s.types().give_tensors(vec![borrow(&r)], vec![vec![h]]).expect("no trap");
        assert!(results[0].is_ok());
        given += 1;
        assert!(given < 100, "4 MiB of 64 KiB tensors is 64");
    };
    assert!(refused.message.contains("4 x max_memory_bytes"), "{}", refused.message);
    assert_eq!(s.end_execute()[0].len(), given);
    assert_eq!(s.handles.held_bytes, 0, "the call's end gives it all back");
}

#[test]
fn set_outputs_refuses_requests_of_another_call_and_decoupled_models() {
    let mut s = state(shared(AllowList::Nothing, None));
    let call = s.begin_execute(1, false);
    let kept = request_at(&mut s, call, 0);
    s.end_execute();
    // A guest that kept a request from an earlier call cannot answer the new call's first.
    s.begin_execute(1, false);
    let borrow = |r: &Resource<HostRequest>| Resource::<HostRequest>::new_borrow(r.rep());
    let results = s.types().set_outputs(vec![borrow(&kept)], vec![vec![output("X", "a")]]).expect("no trap");
    assert!(results[0].as_ref().is_err_and(|e| e.message.contains("not one of the current")));
    assert!(s.end_execute()[0].is_empty());
    // Outside execute (a handle kept until finalize) likewise.
    let results = s.types().set_outputs(vec![borrow(&kept)], vec![vec![output("X", "a")]]).expect("no trap");
    assert!(results[0].as_ref().is_err_and(|e| e.message.contains("not one of the current")));
    let call = s.begin_execute(1, true);
    let r = request_at(&mut s, call, 0);
    let results = s.types().set_outputs(vec![borrow(&r)], vec![vec![output("X", "a")]]).expect("no trap");
    assert!(results[0].as_ref().is_err_and(|e| e.message.contains("decoupled")));
    // Guest bugs trap: lists of different lengths, a request twice.
    let call = s.begin_execute(1, false);
    let r = request_at(&mut s, call, 0);
    assert!(s.types().set_outputs(vec![borrow(&r)], Vec::new()).is_err());
    let twice = s.types().set_outputs(vec![borrow(&r), borrow(&r)], vec![Vec::new(), Vec::new()]);
    assert!(twice.is_err_and(|e| e.to_string().contains("passed twice")));
}

#[test]
fn bytes_a_guest_made_are_held_up_to_four_times_its_memory_limit() {
    // The test state's memory limit is 1 MiB: its tensors may hold 4 MiB in the host.
    let mut s = state(shared(AllowList::Nothing, None));
    let mib = 1usize << 20;
    // Each handle's name and shape count too: 9 bytes here, so four of these leave room for
    // a renamed handle's own 9.
    let n = mib - 18;
    let make = |s: &mut GuestState| s.types().create("T".into(), wit::DataType::Uint8, vec![n as i64], vec![0; n]);
    let held: Vec<_> = (0..4).map(|_| make(&mut s).expect("no trap").expect("within the limit")).collect();
    let refused = make(&mut s).expect("no trap").expect_err("past the limit");
    assert!(refused.message.contains("4 x max_memory_bytes"), "{}", refused.message);
    assert_eq!(refused.code, wit::ErrorCode::Internal);
    let long_name = s.types().with_name(Resource::new_borrow(held[1].rep()), "N".repeat(mib));
    assert!(long_name.is_err(), "a renamed handle's megabyte name past the limit traps");
    // A renamed handle shares the bytes and their charge: dropping the original gives
    // nothing back while the rename holds them (else create, rename, drop would grow the
    // host without bound).
    let renamed = s.types().with_name(Resource::new_borrow(held[0].rep()), "U".into()).expect("with-name");
    let mut held = held.into_iter();
    let first = held.next().expect("four");
    wit::HostTensor::drop(&mut s.types(), first).expect("drop");
    assert!(make(&mut s).expect("no trap").is_err(), "the rename still holds the bytes");
    wit::HostTensor::drop(&mut s.types(), renamed).expect("drop");
    let again = make(&mut s).expect("no trap").expect("the last handle gave the bytes back");
    // Given outputs count until execute returns.
    let call = s.begin_execute(1, false);
    let r = request_at(&mut s, call, 0);
    let big = (String::from("Y"), wit::DataType::Uint8, vec![mib as i64], "a".repeat(mib));
    let give = |s: &mut GuestState, what| s.types().set_outputs(vec![Resource::new_borrow(r.rep())], vec![vec![what]]);
    let results = give(&mut s, big.clone()).expect("no trap");
    assert!(results[0].as_ref().is_err_and(|e| e.message.contains("max_memory_bytes")), "{results:?}");
    s.handles.take_tensor(again).expect("moves into a response");
    assert!(give(&mut s, big).expect("no trap")[0].is_ok());
    assert!(make(&mut s).expect("no trap").is_err(), "the given output still counts");
    assert_eq!(s.end_execute()[0].len(), 1);
    assert!(make(&mut s).expect("no trap").is_ok(), "it left with the response");
    for t in held {
        wit::HostTensor::drop(&mut s.types(), t).expect("drop");
    }
}

#[test]
fn set_outputs_refuses_an_output_given_twice() {
    let mut s = state(shared(AllowList::Nothing, None));
    let call = s.begin_execute(1, false);
    let r = request_at(&mut s, call, 0);
    let borrow = || Resource::<HostRequest>::new_borrow(r.rep());
    let twice = s.types().set_outputs(vec![borrow()], vec![vec![output("X", "a"), output("X", "b")]]).expect("no trap");
    assert!(twice[0].as_ref().is_err_and(|e| e.message.contains("'X' given twice")), "{twice:?}");
    assert!(s.types().set_outputs(vec![borrow()], vec![vec![output("X", "a")]]).expect("no trap")[0].is_ok());
    let again = s.types().set_outputs(vec![borrow()], vec![vec![output("X", "c")]]).expect("no trap");
    assert!(again[0].is_err(), "a later call cannot give the same name again");
    assert_eq!(s.end_execute()[0].len(), 1);
}

#[test]
fn request_at_gives_each_pending_request_of_the_call_once() {
    let mut s = state(shared(AllowList::Nothing, None));
    let call = s.begin_execute(2, false);
    for position in 0..2 {
        s.call.pending_requests.push(Some(host_request(call, position)));
    }
    let second = s.types().at(1).expect("no trap").expect("the second request");
    assert_eq!(s.types().id(Resource::new_borrow(second.rep())).expect("id"), "r1");
    assert!(s.types().at(1).expect("no trap").is_none(), "a handle is given once per call");
    assert!(s.types().at(2).expect("no trap").is_none(), "past the batch");
    assert_eq!(s.call.taken_requests, vec![second.rep()]);
    // what it is given lands at its position in the batch
    let given = s.types().set_outputs(vec![Resource::new_borrow(second.rep())], vec![vec![output("X", "a")]]);
    assert!(given.expect("no trap")[0].is_ok());
    let outputs = s.end_execute();
    assert_eq!((outputs[0].len(), outputs[1].len()), (0, 1));
    // outside an execute-by-value call there is nothing to take
    s.call.pending_requests.clear();
    assert!(s.types().at(0).expect("no trap").is_none());
}

#[test]
fn requests() {
    let mut s = state(shared(AllowList::Nothing, None));
    let (r, _) = request(&mut s, None);
    let borrow = || Resource::<HostRequest>::new_borrow(r.rep());
    assert_eq!(s.types().id(borrow()).expect("id"), "req-1");
    assert_eq!(s.types().requested_outputs(borrow()).expect("outputs"), vec!["OUT".to_string()]);
    let params = s.types().parameters(borrow()).expect("parameters");
    assert_eq!(params.len(), 1);
    assert!(matches!(params[0].value, wit::ParamValue::Int(3)));
    let found = s.types().input(borrow(), "IN".into()).expect("input").expect("present");
    assert_eq!(s.handles.tensor(&found).expect("tensor").shape, vec![2]);
    assert!(s.types().input(borrow(), "NOPE".into()).expect("input").is_none());
    assert_eq!(s.types().inputs(borrow()).expect("inputs").len(), 1);
}

#[test]
fn senders_close_after_the_final_response() {
    let mut s = state(shared(AllowList::Nothing, None));
    let (tx, mut rx) = crate::backend::responder();
    let (r, _) = request(&mut s, Some(tx));
    let sender = s.types().sender(Resource::new_borrow(r.rep())).expect("sender");
    let out = s.types().create("OUT".into(), wit::DataType::Uint8, vec![1], vec![7]).expect("no trap").expect("valid");
    s.types().send(Resource::new_borrow(sender.rep()), vec![out], false).expect("no trap").expect("sent");
    let error = wit::Error { code: wit::ErrorCode::NotFound, message: "nope".into() };
    s.types().send_error(Resource::new_borrow(sender.rep()), error, false).expect("no trap").expect("sent");
    // An empty final response carries only the flag.
    s.types().send(Resource::new_borrow(sender.rep()), vec![], true).expect("no trap").expect("sent");
    let late = s.types().send(Resource::new_borrow(sender.rep()), vec![], true).expect("no trap").expect_err("closed");
    assert_eq!(late.code, wit::ErrorCode::Unavailable);
    assert_eq!(
        late.message,
        "no more responses can be sent for this request \
         (the final response was sent, or the model is not decoupled)"
    );

    let first = rx.try_recv().expect("first response");
    assert!(!first.is_final);
    assert_eq!(first.outputs.expect("outputs")[0].data.as_ref(), &[7u8]);
    let second = rx.try_recv().expect("error response");
    let e = second.outputs.expect_err("an error");
    assert_eq!((e.kind, e.message.as_str()), (crate::error::ErrorKind::NotFound, "nope"));
    // The responder was dropped: the stream ends with no flag-only message.
    assert!(matches!(rx.try_recv(), Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)));
}

#[test]
fn a_non_decoupled_request_has_a_closed_sender() {
    let mut s = state(shared(AllowList::Nothing, None));
    let (r, _) = request(&mut s, None);
    let sender = s.types().sender(Resource::new_borrow(r.rep())).expect("sender");
    let refused = s.types().send(sender, vec![], false).expect("no trap").expect_err("closed");
    assert_eq!(refused.code, wit::ErrorCode::Unavailable);
}

#[test]
fn bad_handles_trap() {
    let mut s = state(shared(AllowList::Nothing, None));
    let e = s.types().name(Resource::new_borrow(12345)).expect_err("a trap");
    assert!(e.to_string().starts_with("resource table: "), "{e}");
}

#[test]
fn latin1_strings_are_their_bytes() {
    assert_eq!(latin1_bytes("abc"), Some(b"abc".to_vec()));
    let all: String = (0u8..=255).map(char::from).collect();
    assert_eq!(latin1_bytes(&all), Some((0u8..=255).collect()));
    assert_eq!(latin1_bytes("\u{100}"), None);
    let mut s = state(shared(AllowList::Nothing, None));
    let t = s.types().create_latin1("t".into(), wit::DataType::Uint8, vec![2], "\u{ff}\u{0}".into());
    let t = t.expect("no trap").expect("valid");
    assert_eq!(s.handles.tensor(&t).expect("tensor").data.as_ref(), &[255u8, 0]);
    let bad = s.types().create_latin1("t".into(), wit::DataType::Uint8, vec![1], "\u{263a}".into()).expect("no trap");
    assert!(bad.is_err_and(|e| e.message.contains("above U+00FF")));
}

#[test]
fn log_keeps_the_last_lines() {
    let mut s = state(shared(AllowList::Nothing, None));
    for i in 0..20 {
        s.host().log(wit_host::LogLevel::Info, format!("line {i}")).expect("log");
    }
    assert_eq!(s.last_log.len(), LOG_LINES_KEPT);
    assert_eq!(s.last_log.first().map(String::as_str), Some("line 4"));
    assert_eq!(s.last_log.last().map(String::as_str), Some("line 19"));
}

#[test]
fn log_lines_are_cut_at_eight_kib() {
    let mut s = state(shared(AllowList::Nothing, None));
    s.host().log(wit_host::LogLevel::Error, "\u{e9}".repeat(5000)).expect("log");
    let kept = s.last_log.last().expect("a line");
    // 4096 two-byte characters fill 8 KiB exactly; the other 904 are cut.
    assert_eq!(kept, &format!("{}... (1808 more bytes cut; log lines keep 8192)", "\u{e9}".repeat(4096)));
    s.host().log(wit_host::LogLevel::Error, "y".repeat(1 << 20)).expect("log");
    let kept = s.last_log.last().map_or(0, String::capacity);
    assert!(kept < 32 << 10, "a megabyte line keeps a new small buffer, not the guest's: {kept}");
    s.host().log(wit_host::LogLevel::Info, "x".repeat(LOG_LINE_BYTES)).expect("log");
    assert_eq!(s.last_log.last().map(String::len), Some(LOG_LINE_BYTES), "a line of the limit is whole");
}
