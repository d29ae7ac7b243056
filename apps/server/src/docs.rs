//! `/docs`: the API reference viewer, served whole from the binary.
//!
//! The viewer (Scalar, vendored in `assets/scalar`, see its `VENDORED.md`) is embedded compressed
//! and sent as it is with `Content-Encoding: gzip`; the page turns off everything that would reach
//! the network (fonts, the request proxy), so the reference works offline and air-gapped.

use axum::Router;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;

/// The viewer, gzip-compressed.
const VIEWER_GZ: &[u8] = include_bytes!("../assets/scalar/standalone.js.gz");

/// Where the viewer's script is served.
pub const SCRIPT_PATH: &str = "/docs/scalar.js";

const PAGE: &str = r#"<!doctype html>
<html>
  <head>
    <title>toolhost-server API</title>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
  </head>
  <body>
    <div id="app"></div>
    <script src="/docs/scalar.js"></script>
    <script>
      // No proxy (requests go straight to this server), no fonts from afar, none of the hosted
      // services (client, AI agent, developer tools).
      Scalar.createApiReference('#app', {
        url: '/openapi.json',
        withDefaultFonts: false,
        hideClientButton: true,
        showDeveloperTools: 'never',
        agent: { disabled: true },
      });
    </script>
  </body>
</html>
"#;

/// The `/docs` page and its script.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/docs", get(|| async { Html(PAGE) })).route(
        SCRIPT_PATH,
        get(|| async {
            (
                [
                    (header::CONTENT_TYPE, "application/javascript; charset=utf-8"),
                    (header::CONTENT_ENCODING, "gzip"),
                    (header::CACHE_CONTROL, "public, max-age=86400"),
                ],
                VIEWER_GZ,
            )
                .into_response()
        }),
    )
}
