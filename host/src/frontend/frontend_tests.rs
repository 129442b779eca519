use super::*;
use crate::infer::RequestedOutput;
use crate::tensor::DataType;

/// A POSIX shared-memory object for one test, removed when dropped.
struct ShmObject {
    key: String,
    path: std::path::PathBuf,
}

impl ShmObject {
    fn new(tag: &str, bytes: &[u8]) -> Self {
        let key = format!("/tessera-frontend-{}-{tag}", std::process::id());
        let path = std::path::Path::new("/dev/shm").join(&key[1..]);
        std::fs::write(&path, bytes).unwrap();
        Self { key, path }
    }
}

impl Drop for ShmObject {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn int32(name: &str, values: &[i32]) -> Tensor {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Tensor::new(name, DataType::Int32, vec![values.len() as i64], bytes::Bytes::from(data)).unwrap()
}

fn shm_input(position: usize, name: &str, count: i64, region: &str, offset: u64) -> ShmInput {
    let target = ShmTarget { region: region.into(), offset, byte_size: count as u64 * 4 };
    ShmInput { position, name: name.into(), datatype: DataType::Int32, shape: vec![count], target }
}

#[test]
fn shm_inputs_are_read_into_their_positions() {
    let bytes: Vec<u8> = [10i32, 11, 12, 13].iter().flat_map(|v| v.to_le_bytes()).collect();
    let object = ShmObject::new("inputs", &bytes);
    let f = Frontend::for_tests();
    f.shm.register("r", &object.key, 4, 12).unwrap();
    // Sent as: a (inline), b (shm), c (inline), d (shm).
    let decoded = DecodedRequest {
        request: InferRequest { inputs: vec![int32("a", &[1]), int32("c", &[3])], ..Default::default() },
        shm_inputs: vec![shm_input(1, "b", 2, "r", 0), shm_input(3, "d", 1, "r", 8)],
    };
    let request = f.read_shm_inputs(decoded).unwrap();
    let names: Vec<&str> = request.inputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    assert_eq!(request.inputs[1], int32("b", &[11, 12]), "region offsets are relative to the region");
    assert_eq!(request.inputs[3], int32("d", &[13]));

    let only_shm = DecodedRequest { shm_inputs: vec![shm_input(0, "x", 1, "r", 0)], ..Default::default() };
    assert_eq!(f.read_shm_inputs(only_shm).unwrap().inputs, [int32("x", &[11])]);
}

#[test]
fn shm_input_errors_name_the_region_and_tensor() {
    let object = ShmObject::new("input-errors", &[0u8; 16]);
    let f = Frontend::for_tests();
    f.shm.register("r", &object.key, 0, 16).unwrap();
    let read = |input: ShmInput| {
        let decoded = DecodedRequest { shm_inputs: vec![input], ..Default::default() };
        f.read_shm_inputs(decoded).unwrap_err()
    };
    let unknown = read(shm_input(0, "x", 1, "nope", 0));
    assert_eq!(unknown.kind, crate::error::ErrorKind::NotFound);
    assert_eq!(unknown.message, "Unable to find shared memory region: 'nope'");
    let past_end = read(shm_input(0, "x", 2, "r", 12));
    assert!(past_end.message.starts_with("Invalid offset + byte size for shared memory region: 'r'"));
    let mut wrong_size = shm_input(0, "x", 2, "r", 0);
    wrong_size.target.byte_size = 4;
    // The size is the model's check (Triton's order); the door reads what was asked for.
    assert_eq!(
        f.read_shm_inputs(DecodedRequest { shm_inputs: vec![wrong_size], ..Default::default() }).unwrap().inputs[0]
            .data
            .len(),
        4
    );
}

#[test]
fn overlapping_shm_outputs_are_rejected() {
    let object = ShmObject::new("outputs", &[0u8; 64]);
    let f = Frontend::for_tests();
    f.shm.register("a", &object.key, 0, 32).unwrap();
    f.shm.register("b", &object.key, 16, 32).unwrap();
    let out = |name: &str, region: &str, offset, byte_size| RequestedOutput {
        name: name.into(),
        class_count: 0,
        shared_memory: Some(ShmTarget { region: region.into(), offset, byte_size }),
    };
    // Region b starts 16 bytes into the same object as a: a[8..24) and b[0..16) share bytes 16..24.
    let mut request = InferRequest { outputs: vec![out("x", "a", 8, 16), out("y", "b", 0, 16)], ..Default::default() };
    let err = f.shm_outputs(&request).err().unwrap();
    assert!(err.message.contains("overlap"), "{}", err.message);
    request.outputs[0] = out("x", "a", 0, 16);
    assert!(f.shm_outputs(&request).is_ok(), "adjacent ranges do not overlap");
    request.outputs[1] = out("y", "b", 20, 16);
    assert!(f.shm_outputs(&request).err().unwrap().message.contains("Invalid offset + byte size"));
}
