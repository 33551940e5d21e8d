//! A bus message as read from the wire (envelope and payload): it decodes or is refused as
//! malformed, never panics; what decodes encodes again and decodes to the same envelope, to
//! the bit (floats too: the workspace's JSON parser reads them exactly, `float_roundtrip`).

pub fn run(data: &[u8]) {
    let Ok(envelope) = silk_bus::Envelope::decode("fuzz", data) else {
        return;
    };
    let bytes = envelope.encode().expect("a decoded envelope encodes");
    let again = silk_bus::Envelope::decode("fuzz", &bytes).expect("an encoded envelope decodes");
    assert_eq!(again, envelope, "the round trip changed the envelope");
}
