//! Length-prefixed little-endian writes shared by the encoders (the counterpart of
//! [`reader`](crate::reader)). A length that does not fit its prefix is an [`Oversize`],
//! which becomes the one [`EncodeError`] of every encoder of this crate.

use thiserror::Error;

use crate::frame::FrameError;

/// Why a body (`QPB1`, `QTB1`) or a framed pop answer (`QPF1`) cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("{what} of {len} bytes does not fit a u16 length")]
    TooLong { what: &'static str, len: usize },
    #[error("{what} {len} does not fit a u32")]
    TooMany { what: &'static str, len: usize },
    #[error("zstd compression failed")]
    Compression,
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the answer's own keys cannot be serialized: {0}")]
    Extra(String),
}

impl From<Oversize> for EncodeError {
    fn from(e: Oversize) -> Self {
        match e {
            Oversize::Text16 { what, len } => EncodeError::TooLong { what, len },
            Oversize::Count32 { what, len } => EncodeError::TooMany { what, len },
        }
    }
}

/// A length that does not fit the prefix it is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Oversize {
    /// A text longer than a `u16` length allows.
    Text16 { what: &'static str, len: usize },
    /// A count or length beyond `u32`.
    Count32 { what: &'static str, len: usize },
}

/// Appends `value` as a `u32`.
pub(crate) fn put_u32(out: &mut Vec<u8>, value: usize, what: &'static str) -> Result<(), Oversize> {
    let value = u32::try_from(value).map_err(|_| Oversize::Count32 { what, len: value })?;
    out.extend_from_slice(&value.to_le_bytes());
    Ok(())
}

/// Appends a `u16` length, then the text's bytes.
pub(crate) fn put_text16(
    out: &mut Vec<u8>,
    text: &str,
    what: &'static str,
) -> Result<(), Oversize> {
    let len = u16::try_from(text.len()).map_err(|_| Oversize::Text16 {
        what,
        len: text.len(),
    })?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_little_endian_and_refuses_what_does_not_fit() {
        let mut out = Vec::new();
        put_u32(&mut out, 0x0102_0304, "n").expect("fits");
        put_text16(&mut out, "ab", "t").expect("fits");
        assert_eq!(out, [4, 3, 2, 1, 2, 0, b'a', b'b']);
        let long = "x".repeat(65_536);
        assert_eq!(
            put_text16(&mut out, &long, "t"),
            Err(Oversize::Text16 {
                what: "t",
                len: 65_536
            })
        );
        assert_eq!(
            put_u32(&mut out, usize::MAX, "n"),
            Err(Oversize::Count32 {
                what: "n",
                len: usize::MAX
            })
        );
        assert_eq!(out.len(), 8, "a refused write appends nothing");
    }
}
