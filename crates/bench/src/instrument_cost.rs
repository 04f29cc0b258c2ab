//! The instrument's own hot paths as a fixed workload for `valgrind --tool=callgrind` (issue 39
//! item 3): the producers' side of `N` messages (build the push bodies, read the push
//! answers), and the consumers' (read `N` delivered messages out of pop answers: parse,
//! stamp, track, build the ack body, read the ack answer), `BATCH` messages a request. Run:
//! `valgrind --tool=callgrind --toggle-collect='*instrument_cost*generate*' <test binary>
//! --ignored --exact instrument_cost::tests::callgrind_workload` (and `*parse*` for the other).

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use queen_client::{ack_body, ack_verdicts, AckRef, PopBody, PushTally, Queen, QueueRef};

    use crate::payload::Payloads;
    use crate::scenarios::{e2e, push};
    use crate::tracker::Tracker;

    const N: u64 = 2_000;
    const BATCH: u64 = 100;

    /// Builds `N` messages' push requests (`BATCH` a request) and reads one push answer per
    /// request, as the producers do.
    #[inline(never)]
    fn generate(p: &Payloads, lane: &QueueRef, answers: &[Vec<u8>]) -> usize {
        let mut bytes = 0;
        for (r, answer) in answers.iter().enumerate() {
            let push = push::request(
                p,
                lane,
                r as u64 * BATCH,
                BATCH as u32,
                1_700_000_000_000_000,
            );
            bytes += push.finish().0.len();
            let tally = PushTally::read(answer).expect("push answer");
            bytes += tally.queued;
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

    /// The 201 answer of a push of `BATCH` messages from `first` (docs/wire.md §5.2).
    fn push_answer(first: u64) -> Vec<u8> {
        let items: Vec<String> = (0..BATCH)
            .map(|i| {
                format!(
                    r#"{{"index":{i},"message_id":"0193a6f2-7c1e-7b3a-9f00-{:012}","transaction_id":"m{}","queueName":"q","status":"queued","offset":{}}}"#,
                    first + i,
                    first + i,
                    first + i
                )
            })
            .collect();
        format!("[{}]", items.join(",")).into_bytes()
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
        let lane = Queen::new("http://127.0.0.1:1").queue("q").partition("p0");
        let pushed: Vec<_> = (0..N / BATCH).map(|b| push_answer(b * BATCH)).collect();
        assert!(generate(&p, &lane, &pushed) > 0);
        let answers: Vec<_> = (0..N / BATCH)
            .map(|b| (pop_answer(&p, b * BATCH), ack_answer(b * BATCH)))
            .collect();
        let tracker = Tracker::new(1);
        tracker.open_window(0);
        assert!(parse(&answers, &tracker) > 0);
        assert!(tracker.verify(N).ok);
    }
}
