//! The instrument's own hot paths as a fixed workload for `valgrind --tool=callgrind` (issue 39
//! item 3): building `N` push items, and reading `N` delivered messages out of pop answers as
//! the e2e consumers do (parse, stamp, track, build the ack body, read the ack answer). Run:
//! `valgrind --tool=callgrind --toggle-collect='*instrument_cost*generate*' <test binary>
//! --ignored --exact instrument_cost::tests::callgrind_workload` (and `*parse*` for the other).

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use queen_client::{ack_body, ack_verdicts, AckRef, PopBody, PushItem};

    use crate::payload::Payloads;
    use crate::scenarios::{e2e, push};
    use crate::tracker::Tracker;

    const N: u64 = 2_000;
    const BATCH: u64 = 100;

    #[inline(never)]
    fn generate(p: &Payloads) -> usize {
        let mut bytes = 0;
        for seq in 0..N {
            let item = PushItem::raw(
                p.body(seq, 1_700_000_000_000_000),
                Some(push::transaction_id(seq)),
            )
            .expect("valid");
            bytes += item.payload.get().len();
        }
        bytes
    }

    /// A pop answer of `BATCH` messages as the broker renders it (docs/wire.md §7.3).
    fn pop_answer(p: &Payloads, first: u64) -> Bytes {
        let msgs: Vec<String> = (first..first + BATCH)
            .map(|seq| {
                format!(
                    r#"{{"id":"0193a6f2-7c1e-7b3a-9f00-{seq:012}","transactionId":"m{seq}","traceId":null,"data":{},"producerSub":null,"createdAt":"2026-12-07T01:12:44.881Z","partitionId":"17","partition":"p0","leaseId":"0193a6f2-7c1e-7b3a-9f00-000000000001","consumerGroup":null,"deliveryAttempt":1,"offset":{seq}}}"#,
                    p.body(seq, 1_700_000_000_000_000)
                )
            })
            .collect();
        format!(
            r#"{{"success":true,"queue":"q","partition":"p0","partitionId":"17","leaseId":"0193a6f2-7c1e-7b3a-9f00-000000000001","consumerGroup":null,"messages":[{}],"partitionsClaimed":1}}"#,
            msgs.join(",")
        )
        .into()
    }

    fn ack_answer(first: u64) -> Vec<u8> {
        let items: Vec<String> = (0..BATCH)
            .map(|i| {
                format!(
                    r#"{{"index":{i},"transactionId":"m{}","success":true,"error":null,"leaseReleased":false,"dlq":false,"noop":false}}"#,
                    first + i
                )
            })
            .collect();
        format!("[{}]", items.join(",")).into_bytes()
    }

    #[inline(never)]
    fn parse(answers: &[(Bytes, Vec<u8>)], tracker: &Tracker) -> usize {
        let mut sent = 0;
        for (pop, ack) in answers {
            let body = PopBody::new(pop.clone());
            let popped = body.view().expect("pop answer");
            e2e::record(tracker, 0, &popped, 1_700_000_000_000_005);
            let acks: Vec<AckRef<'_>> = popped.messages.iter().map(|m| m.completed()).collect();
            sent += ack_body(&acks, None).len();
            let (answered, refused) = ack_verdicts(ack).expect("ack answer");
            sent += answered + refused;
        }
        sent
    }

    #[test]
    #[ignore = "a fixed workload for callgrind, not a check"]
    fn callgrind_workload() {
        let p = Payloads::new(7);
        assert!(generate(&p) > 0);
        let answers: Vec<_> = (0..N / BATCH)
            .map(|b| (pop_answer(&p, b * BATCH), ack_answer(b * BATCH)))
            .collect();
        let tracker = Tracker::new(1);
        tracker.open_window(0);
        assert!(parse(&answers, &tracker) > 0);
        assert!(tracker.verify(N).ok);
    }
}
