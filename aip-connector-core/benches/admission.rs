//! Admission benchmark (written with the admission module).
fn main() {}
