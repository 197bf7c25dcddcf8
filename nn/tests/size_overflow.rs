//! Layer sizes from user input past what memory can count are errors, not panics.

use sparrow_core::Device;
use sparrow_nn::{Block, Embedding, Initializer};

#[test]
fn embedding_past_usize_is_an_error() {
    let e = Embedding::new(usize::MAX, 2);
    let r = e.initialize(&Initializer::Zero, Device::Cpu);
    assert!(r.is_err(), "{r:?}");
}
