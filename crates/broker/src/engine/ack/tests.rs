use super::*;

fn pid(id: i64) -> PartitionId {
    PartitionId::new(id).expect("a partition id")
}

fn ack(txn: &str, status: AckStatus) -> Ack {
    Ack {
        transaction_id: txn.into(),
        partition_id: pid(1),
        status,
        error: None,
        group: "g".into(),
        lease_id: LeaseId::parse("leaseId", "w").expect("an id"),
    }
}

#[test]
fn reason_prefers_the_poison_nack_then_the_first_nack() {
    let with_error = |txn: &str, status, error: Option<&str>| Ack {
        error: error.map(str::to_string),
        ..ack(txn, status)
    };
    let acks = [
        with_error("a", AckStatus::Completed, Some("not a nack")),
        with_error("b", AckStatus::Failed, Some("first")),
        with_error("c", AckStatus::Failed, Some("poison")),
        with_error("d", AckStatus::Failed, None),
    ];
    let refs: Vec<&Ack> = acks.iter().collect();
    let reason = |poison, acks: &[&Ack]| dlq::reason(poison, &nacks(acks)).to_string();
    assert_eq!(reason("c", &refs), "poison");
    assert_eq!(reason("d", &refs), "first");
    assert_eq!(reason("a", &refs), "first");
    assert_eq!(reason("x", &refs[..1]), dlq::DEFAULT_REASON);
}

#[test]
fn statuses_normalise_like_the_wire_says() {
    for text in [
        None,
        Some(""),
        Some("completed"),
        Some("SUCCESS"),
        Some("acked"),
        Some("ok"),
    ] {
        assert_eq!(AckStatus::normalise(text), AckStatus::Completed, "{text:?}");
    }
    assert_eq!(AckStatus::normalise(Some("retry")), AckStatus::Retry);
    assert_eq!(AckStatus::normalise(Some("dlq")), AckStatus::Dlq);
    for text in ["failed", "nope", "error"] {
        assert_eq!(
            AckStatus::normalise(Some(text)),
            AckStatus::Failed,
            "{text}"
        );
    }
}

#[test]
fn leased_groups_come_first_and_nacks_fence_the_others() {
    let mut acks = vec![
        ack("a", AckStatus::Completed),
        ack("b", AckStatus::Completed),
    ];
    acks[1].partition_id = pid(2);
    acks.insert(
        0,
        Ack {
            lease_id: LeaseId::none(),
            ..ack("d", AckStatus::Completed)
        },
    );
    acks.push(ack("c", AckStatus::Failed));
    let groups = group_by_lease(&acks);
    let members: Vec<&[usize]> = groups.iter().map(|g| g.members.as_slice()).collect();
    // Leased groups run before lease-less ones.
    assert_eq!(members, [&[1, 3][..], &[2], &[0]]);
    // The failed "c" fences the lease-less group of its (partition, group) only.
    let fences: Vec<&[[u8; 16]]> = groups.iter().map(|g| g.fence.as_slice()).collect();
    assert_eq!(fences, [&[][..], &[], &[txn_hash("c")]]);
}

#[test]
fn settle_maps_hash_lists_back_to_items() {
    let items = [
        ack("done-before", AckStatus::Completed),
        ack("nacked-before", AckStatus::Failed),
        ack("unknown", AckStatus::Completed),
        ack("fresh", AckStatus::Completed),
    ];
    let refs: Vec<&Ack> = items.iter().collect();
    let hex = |t: &str| to_hex(&txn_hash(t));
    let verdict = AckVerdict {
        ok: true,
        lease_released: true,
        noop_hashes: vec![hex("done-before")],
        stale_hashes: vec![hex("nacked-before")],
        unresolved_hashes: vec![hex("unknown")],
        ..Default::default()
    };
    let out = settle(&verdict, &refs);
    assert!(out[0].success && out[0].noop && out[0].error.is_none());
    assert!(!out[1].success && out[1].error.as_deref() == Some(UNSETTLED));
    assert!(!out[2].success && out[2].error.as_deref() == Some(UNSETTLED));
    assert!(out[3].success && !out[3].noop && out[3].lease_released);

    let refused = AckVerdict {
        ok: false,
        error: Some("invalid or expired lease".into()),
        ..Default::default()
    };
    assert!(settle(&refused, &refs)
        .iter()
        .all(|o| !o.success && o.error.as_deref() == Some("invalid or expired lease")));
}
