//! A bounds-checked little-endian cursor over a byte slice, shared by the decoders. Every read
//! returns `None` when the input runs short; callers attach their own context to that.

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let piece = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(piece)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    pub(crate) fn i64(&mut self) -> Option<i64> {
        self.array().map(i64::from_le_bytes)
    }

    pub(crate) fn uuid_bytes(&mut self) -> Option<[u8; 16]> {
        self.array()
    }

    /// A `u16` length, then that many bytes.
    pub(crate) fn bytes16(&mut self) -> Option<&'a [u8]> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }

    /// A `u32` length, then that many bytes.
    pub(crate) fn bytes32(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()?;
        self.take(usize::try_from(len).ok()?)
    }

    /// Everything not read yet.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::Reader;

    #[test]
    fn reads_little_endian_and_stops_short() {
        let data = [1u8, 2, 0, 3, 0, 0, 0, 9];
        let mut r = Reader::new(&data);
        assert_eq!(r.u8(), Some(1));
        assert_eq!(r.u16(), Some(2));
        assert_eq!(r.u32(), Some(3));
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.u16(), None);
        assert_eq!(r.remaining(), 1, "a failed read consumes nothing");
        assert_eq!(r.rest(), &[9]);
        assert_eq!(r.u8(), None);
    }

    #[test]
    fn length_prefixed_reads_are_bounded() {
        let mut r = Reader::new(&[3, 0, b'a', b'b']);
        assert_eq!(r.bytes16(), None);
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(r.bytes32(), None);
        let mut r = Reader::new(&[2, 0, 0, 0, b'o', b'k']);
        assert_eq!(r.bytes32(), Some(&b"ok"[..]));
    }
}
