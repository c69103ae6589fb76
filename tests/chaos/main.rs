//! The tests that break things: servers killed mid-write (`crash`), a primary stepped down
//! (`failover`), a command failed at each step of each write (`faults`), a history of
//! concurrent writes under faults checked for consistency (`history`), and pushes folded across
//! processes (`fold`). One binary, apart from the behaviour tests in `tests/it/`, so that their
//! fail points and restarts never meet those tests.

#[path = "../common/mod.rs"]
mod common;

mod crash;
mod failover;
mod faults;
mod fold;
mod history;
