//! The swarm: N synthetic agents in one process, each with its own gRPC
//! session to a real coordinator, speaking the real protocol. Bench and test
//! support only (`bench/scale.sh`, `coordinator/tests/it/scale.rs`): it sends
//! no HTTP load, so its counts are synthetic — but consistent, and summed
//! into one reference histogram the coordinator's merged report must equal.

pub mod payload;
pub mod session;
pub mod slices;
pub mod summary;
