//! The `tensor` resource of WIT interface `types`: tensors the guest creates, reads and renames.

use bytes::Bytes;
use wasmtime::component::Resource;

use super::bindings::wit;
use super::convert::{datatype_from_wit, datatype_to_wit, wit_error};
use super::resources::HostTensor;
use super::state::{TypesView, own_size, table_error};
use crate::error::CoreError;
use crate::tensor::Tensor;

impl wit::HostTensor for TypesView<'_> {
    fn create(
        &mut self,
        name: String,
        datatype: wit::DataType,
        shape: Vec<i64>,
        data: Vec<u8>,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, wit::Error>> {
        match Tensor::new_as("tensor", name, datatype_from_wit(datatype), shape, Bytes::from(data)) {
            Ok(t) => Ok(self.handles.new_held_tensors(vec![t])?.map(|mut handles| handles.remove(0))),
            Err(e) => Ok(Err(wit_error(e))),
        }
    }

    fn create_latin1(
        &mut self,
        name: String,
        datatype: wit::DataType,
        shape: Vec<i64>,
        data: String,
    ) -> wasmtime::Result<Result<Resource<HostTensor>, wit::Error>> {
        match latin1_bytes(&data) {
            Some(bytes) => self.create(name, datatype, shape, bytes),
            None => Ok(Err(wit_error(CoreError::invalid_arg(format!(
                "tensor '{name}': create-latin1 data holds a character above U+00FF, which is not one byte"
            ))))),
        }
    }

    fn name(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<String> {
        Ok(self.handles.tensor(&handle)?.name.clone())
    }

    fn datatype(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<wit::DataType> {
        Ok(datatype_to_wit(self.handles.tensor(&handle)?.datatype))
    }

    fn shape(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<Vec<i64>> {
        Ok(self.handles.tensor(&handle)?.shape.clone())
    }

    fn byte_size(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<u64> {
        Ok(self.handles.tensor(&handle)?.data.len() as u64)
    }

    fn data(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.handles.tensor(&handle)?.data.to_vec())
    }

    fn read(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<wit::TensorData> {
        let t = self.handles.tensor(&handle)?;
        Ok(wit::TensorData { datatype: datatype_to_wit(t.datatype), shape: t.shape.clone(), data: t.data.to_vec() })
    }

    fn with_name(&mut self, handle: Resource<HostTensor>, name: String) -> wasmtime::Result<Resource<HostTensor>> {
        let HostTensor(tensor, charge, _) = self.handles.table.get(&handle).map_err(table_error)?;
        let mut tensor = tensor.clone();
        tensor.name = name;
        // The same bytes: the same charge, given back when the last handle to them goes. The
        // new name is this handle's own; WIT gives `with-name` no error, so past the limit it traps.
        let charge = charge.clone();
        let own = own_size(&tensor);
        self.handles.hold_or_trap(own, "tensor.with-name")?;
        self.handles.table.push(HostTensor(tensor, charge, own)).map_err(table_error)
    }

    fn drop(&mut self, handle: Resource<HostTensor>) -> wasmtime::Result<()> {
        self.handles.take_tensor(handle).map(|_| ())
    }
}

/// The bytes a latin-1 string stands for (each character one byte), or `None` if a character is
/// above U+00FF. ASCII text is its own bytes.
pub(super) fn latin1_bytes(text: &str) -> Option<Vec<u8>> {
    if text.is_ascii() {
        return Some(text.as_bytes().to_vec());
    }
    text.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect()
}
