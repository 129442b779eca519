use super::*;

fn params(id: ParamValue, start: bool, end: bool) -> Parameters {
    let mut p = Parameters::new();
    p.insert("sequence_id".into(), id);
    p.insert("sequence_start".into(), ParamValue::Bool(start));
    p.insert("sequence_end".into(), ParamValue::Bool(end));
    p
}

#[test]
fn correlation_ids_from_parameters() {
    let f = SequenceFlags::from_parameters(&params(ParamValue::Int(7), true, false), "m").unwrap();
    assert_eq!(f.id, CorrelationId::Uint(7));
    assert!(f.start && !f.end);
    let big = SequenceFlags::from_parameters(&params(ParamValue::Uint(u64::MAX), false, true), "m").unwrap();
    assert_eq!(big.id, CorrelationId::Uint(u64::MAX));
    let s = SequenceFlags::from_parameters(&params(ParamValue::String("abc".into()), false, false), "m").unwrap();
    assert_eq!(s.id, CorrelationId::Str("abc".into()));
    let missing = SequenceFlags::from_parameters(&Parameters::new(), "m").unwrap_err();
    assert!(missing.message.contains("must specify a non-zero or non-empty correlation ID"), "{}", missing.message);
    assert!(SequenceFlags::from_parameters(&params(ParamValue::Int(0), true, false), "m").is_err());
    assert!(SequenceFlags::from_parameters(&params(ParamValue::String(String::new()), true, false), "m").is_err());
}

#[test]
fn corrid_encodings() {
    let id = CorrelationId::Uint(5);
    assert_eq!(&corrid_bytes(&id, DataType::Uint64, "c", "m").unwrap()[..], &5u64.to_le_bytes());
    assert_eq!(&corrid_bytes(&id, DataType::Int32, "c", "m").unwrap()[..], &5i32.to_le_bytes());
    assert!(corrid_bytes(&CorrelationId::Uint(u64::MAX), DataType::Int64, "c", "m").is_err());
    assert!(corrid_bytes(&CorrelationId::Str("x".into()), DataType::Uint64, "c", "m").is_err());
    assert_eq!(
        &corrid_bytes(&CorrelationId::Str("ab".into()), DataType::Bytes, "c", "m").unwrap()[..],
        b"\x02\0\0\0ab"
    );
}
