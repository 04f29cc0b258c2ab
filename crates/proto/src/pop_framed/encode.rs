//! Encoding a [`FramedPop`] into `QPF1` bytes.

use super::{Claim, EncodeError, FramedPop, Record, MAGIC};
use crate::writer::{put_text16, put_u32};

impl FramedPop {
    /// The `QPF1` bytes of this answer.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let extra = self
            .extra
            .as_ref()
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| EncodeError::Extra(e.to_string()))?;
        let mut out = Vec::with_capacity(self.size_hint(extra.as_deref()));
        out.extend_from_slice(&MAGIC);
        match &extra {
            None => out.push(0),
            Some(json) => {
                out.push(1);
                put_u32(&mut out, json.len(), "own keys length")?;
                out.extend_from_slice(json);
            }
        }
        put_text16(&mut out, &self.queue, "queue name")?;
        put_text16(&mut out, &self.lease_id, "leaseId")?;
        put_text16(&mut out, &self.group, "consumerGroup")?;
        put_u32(&mut out, self.claims.len(), "claim count")?;
        for claim in &self.claims {
            encode_claim(&mut out, claim)?;
        }
        Ok(out)
    }

    fn size_hint(&self, extra: Option<&[u8]>) -> usize {
        let records: usize = self
            .claims
            .iter()
            .flat_map(|c| &c.records)
            .map(|r| 25 + r.bytes.len())
            .sum();
        let claims: usize = self.claims.iter().map(|c| 34 + c.partition.len()).sum();
        5 + extra.map_or(0, |e| 4 + e.len())
            + 10
            + self.queue.len()
            + self.lease_id.len()
            + self.group.len()
            + claims
            + records
    }
}

fn encode_claim(out: &mut Vec<u8>, claim: &Claim) -> Result<(), EncodeError> {
    out.extend_from_slice(&claim.partition_id.to_le_bytes());
    put_text16(out, &claim.partition, "partition name")?;
    out.extend_from_slice(&claim.start.to_le_bytes());
    out.extend_from_slice(&claim.end.to_le_bytes());
    out.extend_from_slice(&claim.delivery_attempt.to_le_bytes());
    put_u32(out, claim.records.len(), "record count")?;
    for record in &claim.records {
        encode_record(out, record)?;
    }
    Ok(())
}

fn encode_record(out: &mut Vec<u8>, record: &Record) -> Result<(), EncodeError> {
    out.extend_from_slice(&record.base.to_le_bytes());
    out.extend_from_slice(&record.created_us.to_le_bytes());
    out.extend_from_slice(&record.frame_count.to_le_bytes());
    out.push(record.codec as u8);
    put_u32(out, record.bytes.len(), "record length")?;
    out.extend_from_slice(&record.bytes);
    Ok(())
}
