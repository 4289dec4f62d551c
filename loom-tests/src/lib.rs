//! loom models of selvedge's concurrent protocols live in `tests/`; build
//! them with `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --release`.
