//! What this build and machine offer for computing: the devices sparrow can use, and when no
//! CUDA device is usable, why (no `cuda` feature in the build, no driver library, no GPU).
//!
//! ```text
//! cargo run --release --features cuda --example cuda_info
//! ```
//! Exits 0 either way: it reports, it does not require a GPU.

use sparrow::core::Device;

fn main() {
    println!("devices: {:?}", Device::available());
    match Device::cuda_status() {
        Ok(n) => println!("CUDA: {n} device(s)"),
        Err(e) => println!("CUDA: unavailable: {e}"),
    }
}
