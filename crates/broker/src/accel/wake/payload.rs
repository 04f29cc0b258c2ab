//! The peer-wake notification format (docs/engine.md §8.2): one payload per batch of a wake
//! tick, a sender line, a kind line, then one line per queue, pushed partition
//! (`queue\x1fpartition`) or released lease (`queue\x1fpartition\x1fgroup`, with data behind
//! the cursor; `queue\x1fpartition\x1fgroup\x1fdrained`, without), split below PostgreSQL's
//! payload limit.

use uuid::Uuid;

use super::PeerBatch;

/// PostgreSQL refuses notification payloads of 8000 bytes or more.
const MAX_PAYLOAD: usize = 7900;
/// Separates the queue and the partition of a hinted peer-notification line (names never
/// contain control characters).
const PAIR_SEPARATOR: char = '\x1f';

/// What a peer notification asks for.
#[derive(Debug, PartialEq)]
pub enum PeerWake<'a> {
    /// Queues to wake, each line with what it names.
    Queues(Vec<Line<'a>>),
    All,
}

/// The fourth field of a released-lease line whose ack left nothing behind the cursor.
const DRAINED: &str = "drained";

/// One line of a wake notification: a queue; with a partition, a push into it; with a
/// release too, a lease on it that an ack released.
#[derive(Debug, PartialEq)]
pub struct Line<'a> {
    pub queue: &'a str,
    pub partition: Option<&'a str>,
    pub released: Option<Release<'a>>,
}

/// A released lease as a line names it: its group, and whether data was left behind the
/// cursor (only then is there anything to wake for).
#[derive(Debug, PartialEq)]
pub struct Release<'a> {
    pub group: &'a str,
    pub pending: bool,
}

/// The kind line of a wake notification. Other kinds (config invalidation, ring repairs) may
/// share the channel later; a receiver that does not know a kind wakes everything, which is
/// never wrong, only wasteful.
pub(super) const KIND_WAKE: &str = "wake";

/// Notification payloads for one tick's batch: the sender id, the kind, then one line per
/// hinted partition (`queue\x1fpartition`), per released lease
/// (`queue\x1fpartition\x1fgroup`, `\x1fdrained` appended when nothing was left behind) or
/// per queue without hints (`queue`), split below
/// PostgreSQL's payload limit. A hint too long for any payload degrades to its queue's line,
/// and a queue name too long for any payload to an empty line, which means "wake everything"
/// (as does a batch marked `everything`).
pub(super) fn payloads(sender: Uuid, batch: &PeerBatch) -> Vec<String> {
    let head = format!("{sender}\n{KIND_WAKE}");
    let fits = |line_len: usize| head.len() + 1 + line_len <= MAX_PAYLOAD;
    let queue_line = |q: &str| {
        if fits(q.len()) {
            q.to_string()
        } else {
            String::new()
        }
    };
    let mut lines = Vec::new();
    if batch.everything {
        lines.push(String::new());
    }
    for (queue, partition, group, pending) in &batch.released {
        let mut line = format!("{queue}{PAIR_SEPARATOR}{partition}{PAIR_SEPARATOR}{group}");
        if !pending {
            line.push(PAIR_SEPARATOR);
            line.push_str(DRAINED);
        }
        if fits(line.len()) {
            lines.push(line);
        } else {
            lines.push(queue_line(queue));
        }
    }
    for (queue, partitions) in &batch.queues {
        if partitions.is_empty() {
            lines.push(queue_line(queue));
        }
        for p in partitions {
            if fits(queue.len() + 1 + p.len()) {
                lines.push(format!("{queue}{PAIR_SEPARATOR}{p}"));
            } else {
                lines.push(queue_line(queue));
            }
        }
    }
    let mut out = Vec::new();
    let mut current = head.clone();
    for line in lines {
        if current.len() + 1 + line.len() > MAX_PAYLOAD {
            out.push(std::mem::replace(&mut current, head.clone()));
        }
        current.push('\n');
        current.push_str(&line);
    }
    if current.len() > head.len() {
        out.push(current);
    }
    out
}

pub(super) fn parse_payload(payload: &str) -> Option<(Uuid, PeerWake<'_>)> {
    let mut lines = payload.split('\n');
    let sender = lines.next()?.parse().ok()?;
    let kind = lines.next();
    let lines: Vec<&str> = lines.collect();
    if kind != Some(KIND_WAKE) || lines.is_empty() || lines.iter().any(|l| l.is_empty()) {
        return Some((sender, PeerWake::All));
    }
    let parsed = lines
        .into_iter()
        .map(|l| {
            let mut fields = l.splitn(4, PAIR_SEPARATOR);
            let queue = fields.next().unwrap_or_default();
            let partition = fields.next();
            let released = fields.next().map(|group| Release {
                group,
                // An unknown marker reads as pending: a needless wake is never wrong.
                pending: fields.next() != Some(DRAINED),
            });
            Line {
                queue,
                partition,
                released,
            }
        })
        .collect();
    Some((sender, PeerWake::Queues(parsed)))
}
