//! The glue behind `export_model!`: one model value per component instance, kept in a static
//! cell (guests are single-threaded: on wasm32 without the atomics feature a thread-local is a
//! plain static).

use std::any::Any;
use std::cell::RefCell;

use crate::bindings::tessera::model::types::{Request as RawRequest, Tensor as RawTensor};
use crate::{Error, InitializeArgs, Model, Request, Tensor, install_panic_hook};

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

pub fn initialize<M: Model>(args: InitializeArgs) -> Result<(), Error> {
    install_panic_hook();
    let model = M::initialize(args)?;
    INSTANCE.with(|cell| *cell.borrow_mut() = Some(Box::new(model)));
    Ok(())
}

pub fn execute<M: Model>(requests: Vec<RawRequest>) -> Vec<Result<Vec<RawTensor>, Error>> {
    install_panic_hook();
    let n = requests.len();
    let requests: Vec<Request> = requests.into_iter().map(Request::from_raw).collect();
    let results = INSTANCE.with(|cell| {
        let mut slot = cell.borrow_mut();
        match slot.as_mut().and_then(|m| m.downcast_mut::<M>()) {
            Some(model) => model.execute(requests),
            None => (0..n)
                .map(|_| Err(Error::unavailable("the model instance is not initialized")))
                .collect(),
        }
    });
    results
        .into_iter()
        .map(|r| r.map(|ts| ts.into_iter().map(Tensor::into_raw).collect()))
        .collect()
}

pub fn finalize<M: Model>() {
    install_panic_hook();
    let model = INSTANCE.with(|cell| cell.borrow_mut().take());
    if let Some(mut model) = model {
        if let Some(model) = model.downcast_mut::<M>() {
            model.finalize();
        }
    }
}
