//! The tensor pack: a request's inputs, or a response's outputs, as one byte string, for
//! `execute-by-value` (world `model-by-value` in wit/model.wit). A Python guest pays for every
//! value the canonical ABI lifts or lowers (componentize-py converts each one, taking and
//! releasing the interpreter's lock around it): a request of two small inputs crossed as about
//! twenty values, and as one when packed. All integers little-endian:
//!
//! ```text
//! pack   := header-size:u32  header  data
//! header := count:u32  entry{count}
//! entry  := name-size:u32  name:utf-8  datatype:u8  rank:u32  dim:s64{rank}  byte-size:u32
//! data   := the bytes of each entry in the pack, in entry order, back to back
//! ```
//!
//! `datatype` is the index of the `data-type` enum (`bool` 0 ... `bytes` 13). An input whose
//! `byte-size` is [`NOT_IN_PACK`] came without its bytes (above 4 KiB, or past the call's 1 MiB):
//! the guest reads it through `request.input`. `header-size` comes first so that a guest can take
//! the header as one slice and reuse what it parsed from it: every request to a model usually has
//! the same header.

use bytes::Bytes;

use super::request::copied_within;
use crate::error::{CoreError, CoreResult};
use crate::tensor::{DataType, Tensor};

/// The `byte-size` of an input that is not in the pack.
pub(crate) const NOT_IN_PACK: u32 = u32::MAX;

/// A request's inputs as a pack: each of up to `max_bytes` with its bytes while `budget` (bytes of
/// the whole call) lasts, as `request.read-inputs` copies them, the others without.
pub(crate) fn pack_inputs(inputs: &[Tensor], max_bytes: u64, budget: &mut usize) -> Vec<u8> {
    let mut header = Vec::with_capacity(64);
    let mut data_size = 0;
    put_u32(&mut header, inputs.len());
    let carried: Vec<bool> = inputs
        .iter()
        .map(|t| {
            let size = t.data.len();
            // a byte-size must fit below NOT_IN_PACK (a 4 GiB input goes as a handle)
            let carry = size < NOT_IN_PACK as usize && copied_within(size, max_bytes, budget);
            if carry {
                data_size += size;
            }
            put_u32(&mut header, t.name.len());
            header.extend_from_slice(t.name.as_bytes());
            header.push(datatype_index(t.datatype));
            put_u32(&mut header, t.shape.len());
            for d in &t.shape {
                header.extend_from_slice(&d.to_le_bytes());
            }
            put_u32(&mut header, if carry { size } else { NOT_IN_PACK as usize });
            carry
        })
        .collect();
    let mut pack = Vec::with_capacity(4 + header.len() + data_size);
    put_u32(&mut pack, header.len());
    pack.extend_from_slice(&header);
    for (t, carry) in inputs.iter().zip(carried) {
        if carry {
            pack.extend_from_slice(&t.data);
        }
    }
    pack
}

/// The outputs of a pack, each checked as `tensor.create` checks a tensor (bytes that fit its
/// datatype and shape); the bytes are slices of `pack`, not copies. Any flaw is the request's
/// `INVALID_ARG`, saying what and where.
pub(crate) fn unpack_outputs(pack: Bytes) -> CoreResult<Vec<Tensor>> {
    let mut reader = Reader { bytes: &pack, at: 0 };
    let header_size = reader.u32("header-size")?;
    let data_start = 4usize.saturating_add(header_size);
    if data_start > pack.len() {
        return Err(malformed(format!("header-size {header_size} passes the end of its {} bytes", pack.len())));
    }
    let mut entries = Vec::new();
    let count = reader.u32("count")?;
    // Each entry takes at least 13 bytes: a count past that is a lie, not a reason to allocate.
    if count > header_size / 13 {
        return Err(malformed(format!("{count} entries cannot fit a header of {header_size} bytes")));
    }
    for _ in 0..count {
        let name_size = reader.u32("name-size")?;
        let name = std::str::from_utf8(reader.take(name_size, "name")?)
            .map_err(|_| malformed("an output name is not UTF-8".into()))?
            .to_owned();
        let index = reader.take(1, "datatype")?[0];
        let datatype = *DataType::ALL
            .get(usize::from(index))
            .ok_or_else(|| malformed(format!("output '{name}': datatype {index} is not a data-type")))?;
        let rank = reader.u32("rank")?;
        let dims = reader.take(rank.saturating_mul(8), "shape")?;
        let shape: Vec<i64> =
            dims.chunks_exact(8).map(|d| i64::from_le_bytes(d.try_into().unwrap_or_default())).collect();
        let size = reader.u32("byte-size")?;
        if size == NOT_IN_PACK as usize {
            return Err(malformed(format!("output '{name}' has no bytes")));
        }
        entries.push((name, datatype, shape, size));
    }
    if reader.at != data_start {
        return Err(malformed(format!("its entries end at byte {} but header-size says {data_start}", reader.at)));
    }
    let data_size: usize = entries.iter().map(|e| e.3).fold(0, usize::saturating_add);
    if data_start.saturating_add(data_size) != pack.len() {
        return Err(malformed(format!(
            "its entries hold {data_size} bytes of data but {} follow the header",
            pack.len() - data_start
        )));
    }
    let mut at = data_start;
    entries
        .into_iter()
        .map(|(name, datatype, shape, size)| {
            let data = pack.slice(at..at + size);
            at += size;
            Tensor::new_as("output", name, datatype, shape, data)
        })
        .collect()
}

fn malformed(what: String) -> CoreError {
    CoreError::invalid_arg(format!("execute-by-value: malformed tensor pack: {what}"))
}

/// The index of `datatype` in the WIT `data-type` enum (the same order as [`DataType::ALL`]).
fn datatype_index(datatype: DataType) -> u8 {
    DataType::ALL.iter().position(|&d| d == datatype).and_then(|i| u8::try_from(i).ok()).unwrap_or(u8::MAX)
}

fn put_u32(out: &mut Vec<u8>, value: usize) {
    out.extend_from_slice(&u32::try_from(value).unwrap_or(u32::MAX).to_le_bytes());
}

/// Reads a pack front to back; every read says what it wanted when the bytes run out.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> CoreResult<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(malformed(format!("it ends at byte {} inside {what}", self.bytes.len())));
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> CoreResult<usize> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::super::convert::datatype_to_wit;
    use super::*;

    fn fp32(name: &str, values: &[f32]) -> Tensor {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor::new(name, DataType::Fp32, vec![1, values.len() as i64], Bytes::from(data)).unwrap()
    }

    #[test]
    fn datatypes_are_numbered_as_the_wit_enum() {
        for (i, &d) in DataType::ALL.iter().enumerate() {
            assert_eq!(datatype_to_wit(d) as u8, i as u8, "{d:?}");
            assert_eq!(datatype_index(d), i as u8);
        }
    }

    #[test]
    fn inputs_pack_and_unpack_to_the_same_tensors() {
        let inputs = vec![fp32("INPUT0", &[1.0, 2.0]), fp32("ÜBER", &[3.5])];
        let mut budget = 1 << 20;
        let pack = pack_inputs(&inputs, 4096, &mut budget);
        assert_eq!(budget, (1 << 20) - 12);
        let header_size = u32::from_le_bytes(pack[..4].try_into().unwrap()) as usize;
        // count, then per entry: name-size, name, datatype, rank, two dims, byte-size
        assert_eq!(header_size, 4 + (4 + 6 + 1 + 4 + 16 + 4) + (4 + 5 + 1 + 4 + 16 + 4));
        assert_eq!(pack.len(), 4 + header_size + 12);
        let back = unpack_outputs(Bytes::from(pack)).unwrap();
        assert_eq!(back, inputs);
    }

    #[test]
    fn inputs_over_the_limit_or_the_budget_come_without_bytes() {
        let inputs = vec![fp32("big", &[0.0; 8]), fp32("small", &[1.0]), fp32("late", &[2.0, 3.0])];
        let mut budget = 6;
        let pack = pack_inputs(&inputs, 16, &mut budget);
        assert_eq!(budget, 2, "only 'small' was carried");
        let header_size = u32::from_le_bytes(pack[..4].try_into().unwrap()) as usize;
        assert_eq!(pack.len(), 4 + header_size + 4);
        // the last four bytes of each entry are its byte-size; entries end at these header offsets
        let big = 4 + (4 + 3 + 1 + 4 + 16 + 4);
        let small = big + (4 + 5 + 1 + 4 + 16 + 4);
        let sizes: Vec<u32> = [big, small, header_size]
            .iter()
            .map(|&end| u32::from_le_bytes(pack[4 + end - 4..4 + end].try_into().unwrap()))
            .collect();
        assert_eq!(sizes, vec![NOT_IN_PACK, 4, NOT_IN_PACK]);
        let err = unpack_outputs(Bytes::from(pack)).unwrap_err();
        assert!(err.message.contains("output 'big' has no bytes"), "{}", err.message);
    }

    #[test]
    fn malformed_packs_say_what_is_wrong() {
        let mut budget = usize::MAX;
        let good = pack_inputs(&[fp32("OUT", &[1.0, 2.0])], 4096, &mut budget);
        let case = |bytes: Vec<u8>| unpack_outputs(Bytes::from(bytes)).unwrap_err().message;
        assert!(case(vec![1, 2]).contains("inside header-size"));
        assert!(case(good[..good.len() - 1].to_vec()).contains("hold 8 bytes of data but 7 follow"));
        let mut longer = good.clone();
        longer.push(0);
        assert!(case(longer).contains("but 9 follow"));
        let mut bad_type = good.clone();
        bad_type[4 + 4 + 4 + 3] = 14;
        assert!(case(bad_type).contains("datatype 14 is not a data-type"));
        let mut many = good.clone();
        many[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(case(many).contains("entries cannot fit"));
        let mut wrong_shape = good.clone();
        wrong_shape[4 + 4 + 4 + 3 + 1 + 4 + 8] = 3; // dims [1, 3] for 8 bytes
        assert!(case(wrong_shape).contains("byte size mismatch for output 'OUT'"));
        let mut bad_name = good;
        bad_name[4 + 4 + 4] = 0xff;
        assert!(case(bad_name).contains("not UTF-8"));
    }
}
