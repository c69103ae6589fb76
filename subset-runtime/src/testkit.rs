//! Test server (in progress).
