//! The URLs of the routes a producer or consumer calls once per message or batch, parsed once
//! per handle: reqwest parses a URL given as text on every request, which cost a load
//! generator ~10 000 instructions a request (callgrind) — as much as the rest of a one-message
//! push on the client side. Every other route is still built from its path per call.

use std::sync::Arc;

use reqwest::Url;

/// `POST` a push.
pub(crate) const PUSH: &str = "/api/v1/push";
/// `POST` a batch of acks.
pub(crate) const ACK_BATCH: &str = "/api/v1/ack/batch";

/// The parsed URLs of [`PUSH`] and [`ACK_BATCH`] on one broker (`None`: the base URL does
/// not parse, and requests build theirs from text, failing as they did).
#[derive(Debug, Clone, Default)]
pub(crate) struct HotUrls(Arc<[Option<Url>; 2]>);

impl HotUrls {
    pub(crate) fn new(base: &str) -> Self {
        let parse = |path: &str| Url::parse(&format!("{base}{path}")).ok();
        Self(Arc::new([parse(PUSH), parse(ACK_BATCH)]))
    }

    /// The parsed URL of `path`, when it is one of the hot routes.
    pub(crate) fn get(&self, path: &str) -> Option<&Url> {
        let slot = match path {
            PUSH => 0,
            ACK_BATCH => 1,
            _ => return None,
        };
        self.0[slot].as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_routes_are_the_urls_built_from_text() {
        let hot = HotUrls::new("http://127.0.0.1:6632");
        for path in [PUSH, ACK_BATCH] {
            let text = format!("http://127.0.0.1:6632{path}");
            assert_eq!(hot.get(path), Some(&Url::parse(&text).unwrap()));
        }
        assert_eq!(hot.get("/api/v1/ack"), None);
        assert_eq!(HotUrls::new("not a url").get(PUSH), None);
    }
}
