//! The commit the binary is built from, for `--version`: the server's build script, shared.

include!("../server/build.rs");
