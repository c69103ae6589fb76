//! Empty: this package holds the derives' compile-fail cases (`tests/ui/`), checked by
//! `tests/ui.rs`. The library is what trybuild passes the test's features (`bson-2`, `bson-3`)
//! on through.
