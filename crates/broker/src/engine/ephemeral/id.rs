//! The id of a delivered ephemeral message, `e:<epoch hex>:<partition>:<seq>` (docs/wire.md
//! §25.4): opaque to clients, minted at pop and read back at ack. The epoch names the ring's
//! incarnation (sql/migrations/0010_ephemeral.sql), so an id of a lost incarnation is told
//! apart from one of the live ring.

use queen_proto::Name;

/// A parsed message id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageId {
    pub epoch: i64,
    pub partition: String,
    pub seq: i64,
}

impl MessageId {
    /// The id as the client sees it.
    pub fn render(&self) -> String {
        format!("e:{:x}:{}:{}", self.epoch, self.partition, self.seq)
    }

    /// Reads an id back; the refusal says what is wrong with it. The partition may itself hold
    /// `:`: the epoch is the first field and the seq the last.
    pub fn parse(text: &str) -> Result<MessageId, String> {
        let bad =
            || format!("{text:?} is not an ephemeral message id (e:<epoch>:<partition>:<seq>)");
        let rest = text.strip_prefix("e:").ok_or_else(bad)?;
        let (epoch, rest) = rest.split_once(':').ok_or_else(bad)?;
        let (partition, seq) = rest.rsplit_once(':').ok_or_else(bad)?;
        let epoch = (!epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| i64::from_str_radix(epoch, 16).ok())
            .flatten()
            .filter(|e| *e > 0)
            .ok_or_else(bad)?;
        let seq = (!seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit()))
            .then(|| seq.parse::<i64>().ok())
            .flatten()
            .filter(|s| *s > 0)
            .ok_or_else(bad)?;
        let partition = Name::parse("the id's partition", partition)
            .map_err(|e| format!("{}: {e}", bad()))?
            .into_string();
        Ok(MessageId {
            epoch,
            partition,
            seq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_round_trips_with_colons_in_its_partition() {
        let id = MessageId {
            epoch: 0x9f1,
            partition: "room:7".into(),
            seq: 12,
        };
        assert_eq!(id.render(), "e:9f1:room:7:12");
        assert_eq!(MessageId::parse(&id.render()), Ok(id));
    }

    #[test]
    fn malformed_ids_are_refused() {
        for bad in [
            "",
            "e:",
            "x:1:p:1",
            "e:1:p",
            "e::p:1",
            "e:zz:p:1",
            "e:0:p:1",
            "e:1:p:0",
            "e:1:p:-1",
            "e:1:p:+1",
            "e:1::1",
            "e:1: p:1",
            "e:ffffffffffffffffff:p:1",
            "e:1:p:99999999999999999999",
        ] {
            assert!(MessageId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
