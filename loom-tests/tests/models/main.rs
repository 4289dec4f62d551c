//! The loom models of selvedge's concurrent protocols, one module per
//! protocol, in one test binary (one build and one link, rather than one
//! per model). Without `--cfg loom` the binary is empty; run them with
//! `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --release`.
#![cfg(loom)]

mod bucket_counts;
mod fallback_watch;
mod fire_once;
mod graph_countdown;
mod inbox;
mod join_slot;
mod latch;
mod merge;
mod parking;
mod promise;
mod read_shares;
mod rescue;
mod run_record;
mod share_with_sleepers;
mod shutdown_gate;
mod spare_blocks;
mod steal_request;
mod trace_ring;
mod withdrawn_request;
