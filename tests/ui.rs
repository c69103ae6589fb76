//! Compile-fail cases for the derives, one misuse per file in `tests/ui/`. (Valid uses are plain
//! tests in `tests/derive/`: with no pass case, trybuild type-checks its project instead of
//! building it.)

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
