//! Timestamps on the wire: rendering microseconds since the Unix epoch as ISO-8601 UTC
//! (`2026-07-30T09:12:44.881Z` for message `createdAt`, microseconds for lease expiries) and
//! parsing the ISO-8601 texts clients send (`subscriptionFrom`).

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, Utc};

/// `2026-07-30T09:12:44.881Z`: millisecond precision, truncated (as the official framed-pop
/// decoder renders `createdAt`).
pub fn iso_millis(micros_since_epoch: i64) -> String {
    let mut out = String::with_capacity(24);
    write_iso_millis(&mut out, micros_since_epoch);
    out
}

/// `2026-07-30T09:12:44.881123Z`: microsecond precision.
pub fn iso_micros(micros_since_epoch: i64) -> String {
    let mut out = String::with_capacity(27);
    write_iso(&mut out, micros_since_epoch, false);
    out
}

/// Appends [`iso_millis`] to `out` without an intermediate allocation (hot JSON rendering).
pub fn write_iso_millis(out: &mut String, micros_since_epoch: i64) {
    write_iso(out, micros_since_epoch, true);
}

fn write_iso(out: &mut String, micros: i64, millis: bool) {
    let secs = micros.div_euclid(1_000_000);
    let sub = micros.rem_euclid(1_000_000);
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let of_day = secs.rem_euclid(86_400);
    if (0..=9999).contains(&year) {
        push_digits(out, year, 4);
    } else {
        out.push_str(&year.to_string());
    }
    out.push('-');
    push_digits(out, month, 2);
    out.push('-');
    push_digits(out, day, 2);
    out.push('T');
    push_digits(out, of_day / 3600, 2);
    out.push(':');
    push_digits(out, of_day / 60 % 60, 2);
    out.push(':');
    push_digits(out, of_day % 60, 2);
    out.push('.');
    if millis {
        push_digits(out, sub / 1000, 3);
    } else {
        push_digits(out, sub, 6);
    }
    out.push('Z');
}

/// Appends the `width` low decimal digits of a non-negative `value`, zero-padded.
fn push_digits(out: &mut String, value: i64, width: u32) {
    for place in (0..width).rev() {
        let digit = value / 10_i64.pow(place) % 10;
        out.push(char::from(b'0' + digit as u8));
    }
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01 (H. Hinnant's
/// algorithm); total over the day range of `i64` microseconds.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Parses an ISO-8601 / RFC 3339 timestamp: `YYYY-MM-DD`, optionally followed by `T` (or `t`
/// or a space) and `HH:MM[:SS[.fraction]]`, the fraction of any length (digits past
/// nanoseconds are ignored), then `Z`/`z`, a numeric offset `±HH`, `±HHMM` or `±HH:MM`, or
/// nothing (UTC). `None` when the text is not such a timestamp, or when the instant lies
/// outside [`accepted_range`].
pub fn parse_iso(text: &str) -> Option<DateTime<Utc>> {
    parse_any_iso(text).filter(|t| {
        let (first, last) = accepted_range();
        (first..=last).contains(t)
    })
}

/// The instants a client may send: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z UTC.
/// Every one of them is a PostgreSQL `timestamptz` in both its binary and its text form and
/// renders as a four-digit ISO year, so a timestamp accepted once (and stored, as a
/// subscription intent is) can never fail a later statement. PostgreSQL's text input has no
/// year 0 (`0000-01-01` is an error there) although chrono has one.
pub fn accepted_range() -> (DateTime<Utc>, DateTime<Utc>) {
    let first = NaiveDate::from_ymd_opt(1, 1, 1).unwrap_or(NaiveDate::MIN);
    let last = NaiveDate::from_ymd_opt(9999, 12, 31).unwrap_or(NaiveDate::MAX);
    let end_of_day = NaiveTime::from_hms_micro_opt(23, 59, 59, 999_999).unwrap_or(NaiveTime::MIN);
    (
        first.and_time(NaiveTime::MIN).and_utc(),
        last.and_time(end_of_day).and_utc(),
    )
}

fn parse_any_iso(text: &str) -> Option<DateTime<Utc>> {
    let mut s = Scan(text.as_bytes());
    let year = s.number(4)?;
    s.expect(b'-')?;
    let month = s.number(2)?;
    s.expect(b'-')?;
    let day = s.number(2)?;
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    let mut time = NaiveTime::MIN;
    if matches!(s.peek(), Some(b'T' | b't' | b' ')) {
        s.skip();
        let hour = s.number(2)?;
        s.expect(b':')?;
        let minute = s.number(2)?;
        let mut second = 0;
        let mut nanos = 0;
        if s.peek() == Some(b':') {
            s.skip();
            second = s.number(2)?;
            if matches!(s.peek(), Some(b'.' | b',')) {
                s.skip();
                nanos = s.fraction()?;
            }
        }
        time = NaiveTime::from_hms_nano_opt(hour, minute, second, nanos)?;
    }
    let offset_secs = match s.peek() {
        None => 0,
        Some(b'Z' | b'z') => {
            s.skip();
            0
        }
        Some(sign @ (b'+' | b'-')) => {
            s.skip();
            let hours = s.number(2)?;
            if s.peek() == Some(b':') {
                s.skip();
            }
            let minutes = if s.peek().is_some() { s.number(2)? } else { 0 };
            if hours > 23 || minutes > 59 {
                return None;
            }
            let secs = i64::from(hours * 3600 + minutes * 60);
            if sign == b'-' {
                -secs
            } else {
                secs
            }
        }
        Some(_) => return None,
    };
    if s.peek().is_some() {
        return None;
    }
    date.and_time(time)
        .and_utc()
        .checked_sub_signed(Duration::seconds(offset_secs))
}

struct Scan<'a>(&'a [u8]);

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    fn skip(&mut self) {
        self.0 = self.0.get(1..).unwrap_or_default();
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.skip())
    }

    /// Exactly `width` ASCII digits.
    fn number(&mut self, width: usize) -> Option<u32> {
        let digits = self.0.get(..width)?;
        let mut value = 0u32;
        for &d in digits {
            if !d.is_ascii_digit() {
                return None;
            }
            value = value * 10 + u32::from(d - b'0');
        }
        self.0 = &self.0[width..];
        Some(value)
    }

    /// One or more digits of a decimal fraction, as nanoseconds.
    fn fraction(&mut self) -> Option<u32> {
        let len = self.0.iter().take_while(|d| d.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        let mut nanos = 0u32;
        for place in 0..9 {
            let digit = self
                .0
                .get(place)
                .filter(|_| place < len)
                .map_or(0, |d| d - b'0');
            nanos = nanos * 10 + u32::from(digit);
        }
        self.0 = &self.0[len..];
        Some(nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Timelike};

    #[test]
    fn renders_millis_and_micros() {
        let us = Utc
            .with_ymd_and_hms(2026, 7, 30, 9, 12, 44)
            .single()
            .map(|t| t.timestamp_micros())
            .unwrap_or_default()
            + 881_123;
        assert_eq!(iso_millis(us), "2026-07-30T09:12:44.881Z");
        assert_eq!(iso_micros(us), "2026-07-30T09:12:44.881123Z");
        assert_eq!(iso_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(iso_micros(-1), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn rendering_agrees_with_chrono() {
        let mut us: i64 = -62_135_596_800_000_000; // 0001-01-01
        while us < 253_402_300_799_000_000 {
            let t = DateTime::<Utc>::from_timestamp_micros(us).unwrap_or_default();
            assert_eq!(
                iso_micros(us),
                t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
            );
            assert_eq!(
                iso_millis(us),
                t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
            );
            us += 7_777_777_777_777;
        }
    }

    #[test]
    fn extreme_inputs_do_not_panic() {
        for us in [i64::MIN, i64::MAX, i64::MIN + 1, i64::MAX - 1] {
            let text = iso_millis(us);
            assert!(text.ends_with('Z'), "{text}");
            assert!(iso_micros(us).ends_with('Z'));
        }
    }

    #[test]
    fn parses_what_clients_send() {
        let t = parse_iso("2026-11-29T11:00:00.123456Z").expect("python isoformat");
        assert_eq!(t.timestamp_micros() % 1_000_000, 123_456);
        assert_eq!((t.year(), t.month(), t.day(), t.hour()), (2026, 11, 29, 11));
        let base = parse_iso("2026-11-29T11:00:00Z").expect("no fraction");
        for text in [
            "2026-11-29T11:00:00.000Z",
            "2026-11-29T11:00:00.0z",
            "2026-11-29T11:00:00.000000000000Z",
            "2026-11-29T11:00:00+00:00",
            "2026-11-29T13:00:00+02:00",
            "2026-11-29T13:00:00+0200",
            "2026-11-29T13:00:00+02",
            "2026-11-29T08:30:00-02:30",
            "2026-11-29 11:00:00",
            "2026-11-29T11:00",
        ] {
            assert_eq!(parse_iso(text), Some(base), "{text}");
        }
        let long = parse_iso("2026-11-29T11:00:00.1234567891234Z").expect("long fraction");
        assert_eq!(long.timestamp_subsec_nanos(), 123_456_789);
        assert_eq!(
            parse_iso("2026-11-29").map(|t| t.hour()),
            Some(0),
            "a bare date is midnight UTC"
        );
    }

    #[test]
    fn rejects_garbage() {
        for text in [
            "",
            "now",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T11:00:00.Z",
            "2026-11-29T11:00:00Zjunk",
            "2026-11-29T11:00:00+25:00",
            "2026-11-29T11:00:00+01:7",
            "2026-1-29",
            "é026-11-29",
            "2026-11-29T11:00:00 Z",
        ] {
            assert_eq!(parse_iso(text), None, "{text}");
        }
    }

    #[test]
    fn instants_postgresql_cannot_take_are_refused() {
        for text in [
            "0000-01-01T00:00:00Z",
            "0000-12-31",
            "0001-01-01T00:30:00+01:00",
            "9999-12-31T23:59:59Z-00:01",
            "9999-12-31T23:30:00-01:00",
        ] {
            assert_eq!(parse_iso(text), None, "{text}");
        }
        let (first, last) = accepted_range();
        assert_eq!(parse_iso("0001-01-01T00:00:00Z"), Some(first));
        assert_eq!(parse_iso("9999-12-31T23:59:59.999999Z"), Some(last));
        assert_eq!(parse_iso("0001-01-01T01:00:00+01:00"), Some(first));
    }

    #[test]
    fn parse_never_panics_on_prefixes() {
        let text = "2026-11-29T11:00:00.123456+05:30";
        for end in 0..=text.len() {
            let _ = parse_iso(&text[..end]);
        }
        assert!(parse_iso(text).is_some());
    }
}
