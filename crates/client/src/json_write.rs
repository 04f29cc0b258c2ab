//! JSON text written by hand for the lean paths (borrowed acks, in-place push bodies): the
//! strings they carry are ids and names, copied through unless a character needs escaping.

/// Appends `s` as a JSON string.
pub(crate) fn string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.extend_from_slice(s.as_bytes());
    } else {
        for b in s.bytes() {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0x00..=0x1f => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
                _ => out.push(b),
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    #[test]
    fn strings_read_back_as_written() {
        for s in ["plain-id_1", "", "quote\" back\\ tab\t nl\n nul\0 é ✓"] {
            let mut out = Vec::new();
            super::string(&mut out, s);
            assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), s);
        }
    }
}
