//! The web dashboard at `/`: three static files compiled into the binary, a page that reads
//! the broker's own JSON API. Nothing is fetched from outside at run time.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use axum::Router;

use crate::engine::Engine;

const INDEX: &str = include_str!("../../dashboard/index.html");
const APP: &str = include_str!("../../dashboard/app.js");
const STYLE: &str = include_str!("../../dashboard/style.css");

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/dashboard/") }))
        .route(
            "/dashboard/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/dashboard/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP) }),
        )
        .route(
            "/dashboard/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")],
        body,
    )
}
