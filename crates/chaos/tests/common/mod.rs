//! What the chaos test files share: the `queen` binary of this build.

use std::path::PathBuf;

/// The `queen` binary beside `queen-chaos` (built by `cargo test --workspace`; alone, build it
/// first).
pub fn queen_bin() -> PathBuf {
    let chaos = PathBuf::from(env!("CARGO_BIN_EXE_queen-chaos"));
    let queen = chaos.with_file_name("queen");
    assert!(
        queen.is_file(),
        "{} is missing: run `cargo build -p queen-broker` (or `cargo test --workspace`) first",
        queen.display()
    );
    queen
}
