//! Smoke test of `subset` on bson 3; the test is in `tests/smoke.rs`.
