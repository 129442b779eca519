//! Model warmup (`model_warmup` in the config): sample requests run on every instance before
//! the version is served; a failing sample fails the load with its error.

use std::path::Path;

use bytes::Bytes;

use super::io::ModelIo;
use crate::config::pb::ModelWarmup;
use crate::config::pb::model_warmup::input::InputDataType;
use crate::error::{CoreError, CoreResult};
use crate::infer::InferRequest;
use crate::scheduler::Scheduler;
use crate::tensor::{DataType, Tensor, push_bytes_element};

/// Runs each sample `count` times on every instance, checking the outputs as a request's would be.
pub fn run(io: &ModelIo, scheduler: &Scheduler, samples: &[ModelWarmup], model_dir: &Path) -> CoreResult<()> {
    for sample in samples {
        let fail = |e: CoreError| {
            CoreError::new(e.kind, format!("model '{}' failed warmup sample '{}': {}", io.name, sample.name, e.message))
        };
        let request = request(io, sample, model_dir).map_err(fail)?;
        let (exec, batch_size, wanted) = io.prepare(request).map_err(fail)?;
        let times = usize::try_from(sample.count.max(1)).unwrap_or(1);
        scheduler.execute_on_each(&[exec], times, |results| {
            for outputs in results {
                io.postprocess(outputs.map_err(fail)?, batch_size, &wanted).map_err(fail)?;
            }
            Ok(())
        })?;
        tracing::info!(model = io.name.as_str(), sample = sample.name.as_str(), "warmup done");
    }
    Ok(())
}

/// The sample as a request: zero, random (deterministic) or file data for each input.
fn request(io: &ModelIo, sample: &ModelWarmup, model_dir: &Path) -> CoreResult<InferRequest> {
    let mut request =
        InferRequest { model_name: io.name.clone(), id: Some(format!("warmup:{}", sample.name)), ..Default::default() };
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut random = move || {
        // xorshift64*: deterministic, dependency-free filler
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    for (name, input) in &sample.inputs {
        let datatype = crate::config::config_datatype(name, input.data_type)?;
        let mut shape = if io.max_batch_size > 0 { vec![i64::from(sample.batch_size.max(1))] } else { Vec::new() };
        shape.extend(&input.dims);
        let count = crate::tensor::element_count(&shape)?;
        let data: Bytes = match &input.input_data_type {
            Some(InputDataType::InputDataFile(file)) => {
                let path = model_dir.join("warmup").join(file);
                Bytes::from(std::fs::read(&path).map_err(|e| {
                    CoreError::invalid_arg(format!("cannot read warmup data file {}: {e}", path.display()))
                })?)
            }
            Some(InputDataType::RandomData(true)) => match datatype.element_size() {
                None => {
                    let mut out = Vec::new();
                    for _ in 0..count {
                        let word: Vec<u8> = (0..8).map(|_| b'a' + (random() % 26) as u8).collect();
                        push_bytes_element(&mut out, &word)?;
                    }
                    Bytes::from(out)
                }
                Some(size) => {
                    let mut out = Vec::with_capacity(count * size);
                    for _ in 0..count {
                        let r = random();
                        match datatype {
                            DataType::Fp32 => {
                                out.extend_from_slice(&((r >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes())
                            }
                            DataType::Fp64 => {
                                out.extend_from_slice(&((r >> 11) as f64 / (1u64 << 53) as f64).to_le_bytes())
                            }
                            DataType::Fp16 => out.extend_from_slice(
                                &half::f16::from_f32((r >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes(),
                            ),
                            DataType::Bf16 => out.extend_from_slice(
                                &half::bf16::from_f32((r >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes(),
                            ),
                            DataType::Bool => out.push((r & 1) as u8),
                            // small non-negative integers are valid for every integer type
                            _ => {
                                let mut v = vec![0u8; size];
                                v[0] = (r % 100) as u8;
                                out.extend_from_slice(&v);
                            }
                        }
                    }
                    Bytes::from(out)
                }
            },
            // zero_data, or nothing chosen
            _ => crate::tensor::zeros(datatype, &shape)?,
        };
        request.inputs.push(Tensor::new(name.clone(), datatype, shape, data)?);
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_and_samples(extra: &str) -> (ModelIo, Vec<ModelWarmup>) {
        let text = format!(
            r#"name: "m" max_batch_size: 4
            input [ {{ name: "a" data_type: TYPE_FP32 dims: [ 3 ] }},
                    {{ name: "s" data_type: TYPE_STRING dims: [ 2 ] }} ]
            output [ {{ name: "a" data_type: TYPE_FP32 dims: [ 3 ] }} ]
            {extra}"#
        );
        let config = crate::config::parse_pbtxt(&text, Path::new("config.pbtxt")).unwrap();
        (ModelIo::from_config(&config, Path::new("/nonexistent")).unwrap(), config.model_warmup)
    }

    #[test]
    fn samples_become_requests_with_the_batch_dimension() {
        let (io, samples) = io_and_samples(
            r#"model_warmup [ { name: "w" batch_size: 2
                inputs { key: "a" value: { data_type: TYPE_FP32 dims: [ 3 ] random_data: true } }
                inputs { key: "s" value: { data_type: TYPE_STRING dims: [ 2 ] zero_data: true } } } ]"#,
        );
        let request = request(&io, &samples[0], Path::new("/nonexistent")).unwrap();
        assert_eq!(request.id.as_deref(), Some("warmup:w"));
        let a = request.inputs.iter().find(|t| t.name == "a").unwrap();
        assert_eq!((a.shape.clone(), a.data.len()), (vec![2, 3], 24));
        assert!(a.data.chunks_exact(4).any(|c| c != [0; 4]), "random data is not all zero");
        let s = request.inputs.iter().find(|t| t.name == "s").unwrap();
        assert_eq!(crate::tensor::bytes_elements(&s.data).count(), 4);
        io.prepare(request).expect("a warmup request passes the model's own checks");
    }

    #[test]
    fn a_missing_data_file_names_the_file() {
        let (io, samples) = io_and_samples(
            r#"model_warmup [ { name: "w" batch_size: 1
                inputs { key: "a" value: { data_type: TYPE_FP32 dims: [ 3 ] input_data_file: "a.bin" } } } ]"#,
        );
        let err = request(&io, &samples[0], Path::new("/nonexistent")).unwrap_err();
        assert!(err.message.contains("/nonexistent/warmup/a.bin"), "{}", err.message);
    }
}
