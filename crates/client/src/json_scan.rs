//! A forward reader over JSON text for answers read only in part ([`crate::PopBody::view`]): it
//! borrows the strings it is asked for, and skips every other value, strings by `memchr` (so a
//! 1 KiB payload costs a few vector compares, not a loop over its bytes). It checks the
//! structure only as far as it reads — it is not a validator — and never panics on any input.

use std::borrow::Cow;

use crate::{Error, Result};

/// A cursor over one JSON text.
pub(crate) struct Scan<'a> {
    s: &'a [u8],
    at: usize,
}

fn bad(what: &str, at: usize) -> Error {
    Error::Decode(format!("{what} at byte {at} of the answer"))
}

impl<'a> Scan<'a> {
    pub(crate) fn new(s: &'a [u8]) -> Self {
        Self { s, at: 0 }
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.s.get(self.at) {
            self.at += 1;
        }
        self.s.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<()> {
        if self.s.get(self.at) == Some(&byte) {
            self.at += 1;
            return Ok(());
        }
        if self.peek() != Some(byte) {
            return Err(bad(&format!("expected `{}`", byte as char), self.at));
        }
        self.at += 1;
        Ok(())
    }

    /// Whether the next value is the literal `word` (consumed if so).
    fn literal(&mut self, word: &[u8]) -> bool {
        self.peek();
        let hit = self.s[self.at..].starts_with(word);
        if hit {
            self.at += word.len();
        }
        hit
    }

    /// The end of the document: only whitespace may follow.
    pub(crate) fn end(&mut self) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(bad("trailing characters", self.at)),
        }
    }

    /// An object: `field(scan, key)` for each key, which must read (or skip) its value. The
    /// key is its raw text between the quotes (escapes not decoded: the keys read here have
    /// none, and a key written with escapes is simply not recognised).
    pub(crate) fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, &[u8]) -> Result<()>,
    ) -> Result<()> {
        self.expect(b'{')?;
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.expect(b'"')?;
            let (end, _) = self.string_end(self.at)?;
            let key = &self.s[self.at..end - 1];
            self.at = end;
            self.expect(b':')?;
            field(self, key)?;
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(bad("expected `,` or `}`", self.at)),
            }
        }
    }

    /// An array: `element(scan)` for each element, which must read (or skip) it.
    pub(crate) fn array(&mut self, mut element: impl FnMut(&mut Self) -> Result<()>) -> Result<()> {
        self.expect(b'[')?;
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            element(self)?;
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(bad("expected `,` or `]`", self.at)),
            }
        }
    }

    /// A string's text: borrowed, or decoded when it holds escapes.
    pub(crate) fn string(&mut self) -> Result<Cow<'a, str>> {
        self.expect(b'"')?;
        let open = self.at - 1;
        let (end, escaped) = self.string_end(self.at)?;
        self.at = end;
        let raw = &self.s[open + 1..end - 1];
        if !escaped {
            return std::str::from_utf8(raw)
                .map(Cow::Borrowed)
                .map_err(|_| bad("a string that is not UTF-8", open));
        }
        serde_json::from_slice::<String>(&self.s[open..end])
            .map(Cow::Owned)
            .map_err(|e| bad(&format!("a bad string ({e})"), open))
    }

    /// A string, or `null` read as the empty string.
    pub(crate) fn string_or_null(&mut self) -> Result<Cow<'a, str>> {
        if self.literal(b"null") {
            return Ok(Cow::Borrowed(""));
        }
        self.string()
    }

    /// An integer, or `null`.
    pub(crate) fn int_or_null(&mut self) -> Result<Option<i64>> {
        if self.literal(b"null") {
            return Ok(None);
        }
        self.peek();
        let start = self.at;
        let negative = self.s.get(self.at) == Some(&b'-');
        self.at += usize::from(negative);
        let mut n: i64 = 0;
        let digits_from = self.at;
        while let Some(d @ b'0'..=b'9') = self.s.get(self.at) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(i64::from(d - b'0')))
                .ok_or_else(|| bad("an integer out of range", start))?;
            self.at += 1;
        }
        if self.at == digits_from {
            return Err(bad("expected an integer", start));
        }
        Ok(Some(if negative { -n } else { n }))
    }

    /// `true` or `false`.
    pub(crate) fn bool(&mut self) -> Result<bool> {
        if self.literal(b"true") {
            Ok(true)
        } else if self.literal(b"false") {
            Ok(false)
        } else {
            Err(bad("expected true or false", self.at))
        }
    }

    /// Skips one value of any kind; its text.
    pub(crate) fn skip(&mut self) -> Result<&'a [u8]> {
        let start = match self.peek() {
            Some(_) => self.at,
            None => return Err(bad("expected a value", self.at)),
        };
        match self.s[start] {
            b'"' => self.at = self.string_end(start + 1)?.0,
            b'{' | b'[' => self.skip_container(start)?,
            _ => {
                let len = self.s[start..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
                    .unwrap_or(self.s.len() - start);
                if len == 0 {
                    return Err(bad("expected a value", start));
                }
                self.at = start + len;
            }
        }
        Ok(&self.s[start..self.at])
    }

    /// Past the object or array opening at `start`, counting brackets outside strings.
    fn skip_container(&mut self, start: usize) -> Result<()> {
        let mut depth = 0usize;
        let mut at = start;
        while let Some(&b) = self.s.get(at) {
            at += 1;
            match b {
                b'"' => at = self.string_end(at)?.0,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.at = at;
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
        Err(bad("an unclosed object or array", start))
    }

    /// The index just past the closing quote of the string whose text begins at `from`, and
    /// whether the string holds escapes. Short strings (keys, ids) are looked through byte by
    /// byte; past `SHORT` bytes, `memchr` takes over.
    fn string_end(&self, from: usize) -> Result<(usize, bool)> {
        const SHORT: usize = 48;
        let mut at = from;
        let mut escaped = false;
        let short = self.s.get(from..).unwrap_or_default();
        let short = &short[..short.len().min(SHORT)];
        match quote_or_backslash(short) {
            Some(i) if short[i] == b'"' => return Ok((from + i + 1, false)),
            Some(i) => {
                escaped = true;
                at += i + 2;
            }
            None => at += short.len(),
        }
        loop {
            let rest = self.s.get(at..).unwrap_or_default();
            match memchr::memchr2(b'"', b'\\', rest) {
                Some(i) if rest[i] == b'"' => return Ok((at + i + 1, escaped)),
                Some(i) => {
                    escaped = true;
                    at += i + 2;
                }
                None => return Err(bad("an unclosed string", from.saturating_sub(1))),
            }
        }
    }
}

/// The first `"` or `\\` in `s`, eight bytes at a time (the zero-byte test of Mycroft: exact
/// for the lowest match, which is the one taken).
fn quote_or_backslash(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let w = u64::from_le_bytes(w);
        let hits = zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let rest = words.remainder();
    rest.iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_search_finds_the_first_quote_or_backslash() {
        let mut text = vec![b'a'; 40];
        assert_eq!(quote_or_backslash(&text), None);
        for at in 0..40 {
            for mark in [b'"', b'\\'] {
                let mut t = text.clone();
                t[at] = mark;
                if at + 3 < 40 {
                    t[at + 3] = b'"';
                }
                assert_eq!(quote_or_backslash(&t), Some(at), "{mark} at {at}");
            }
        }
        text[9] = 0x80 | b'"';
        assert_eq!(
            quote_or_backslash(&text),
            None,
            "a high byte is not a quote"
        );
    }

    #[test]
    fn skips_return_the_value_text() {
        let doc = br#" [ "a\"]" , {"k":[1,{"x":"}"}]} , -12.5e3 , null ,[] ] "#;
        let mut scan = Scan::new(doc);
        let mut seen = Vec::new();
        scan.array(|s| {
            seen.push(String::from_utf8(s.skip()?.to_vec()).unwrap());
            Ok(())
        })
        .unwrap();
        scan.end().unwrap();
        assert_eq!(
            seen,
            [
                r#""a\"]""#,
                r#"{"k":[1,{"x":"}"}]}"#,
                "-12.5e3",
                "null",
                "[]"
            ]
        );
    }

    #[test]
    fn strings_borrow_unless_escaped() {
        let mut scan = Scan::new(br#"["plain", "tab\tq\"\u00e9", null]"#);
        let mut got = Vec::new();
        scan.array(|s| {
            got.push(s.string_or_null()?);
            Ok(())
        })
        .unwrap();
        assert!(matches!(got[0], Cow::Borrowed("plain")));
        assert_eq!(got[1], "tab\tq\"é");
        assert_eq!(got[2], "");
    }

    #[test]
    fn broken_text_is_an_error_never_a_panic() {
        let doc = br#"{"a":[1,"x\\",{"b":null}],"c":"d","n":-3,"t":true}"#;
        for cut in 0..doc.len() {
            let mut scan = Scan::new(&doc[..cut]);
            let read = scan.object(|s, _| s.skip().map(|_| ()));
            assert!(read.is_err(), "prefix of {cut} bytes read as whole");
        }
        for bad_doc in [
            &b"{\"a\" 1}"[..],
            b"[1 2]",
            b"{\"a\":}",
            b"\"\\",
            b"]",
            b"{\"a\":1}}",
        ] {
            let mut scan = Scan::new(bad_doc);
            let read = walk(&mut scan).and_then(|()| scan.end());
            assert!(read.is_err(), "{}", String::from_utf8_lossy(bad_doc));
        }
    }

    /// Reads every object and array, skips the scalars.
    fn walk(scan: &mut Scan<'_>) -> Result<()> {
        match scan.peek() {
            Some(b'{') => scan.object(|s, _| walk(s)),
            Some(b'[') => scan.array(walk),
            _ => scan.skip().map(|_| ()),
        }
    }
}
