//! An array of more than 2^31 elements: write and read past index 2^31, slice across the
//! boundary, sum and argmax, with exact results. The array is a u8 of 2^31 + 1000 elements
//! (2 GiB); it is created zeroed (calloc, untouched pages cost nothing) and written in place
//! through `with_slice_mut`, so no full copy is ever made on the CPU. On another device the
//! array is written in host memory and moved there once, and the operators run there.

use sparrow_core::{device_test, testing::test_device, with_device, DType, Device, NDArray};

const BOUND: usize = 1 << 31;
const N: usize = BOUND + 1000;

device_test! {
fn u8_array_past_2_pow_31() {
    // Written through a host view, so made in host memory whatever the device under test.
    let host = with_device(Device::Cpu, || NDArray::zeros(&[N], DType::U8))
        .unwrap()
        .unwrap();
    assert_eq!(host.size(), N);
    // A few values below and past the boundary; the maximum sits past 2^31.
    let writes: [(usize, u8); 6] = [
        (10, 3),
        (BOUND - 1, 200),
        (BOUND, 1),
        (BOUND + 17, 255),
        (BOUND + 500, 7),
        (N - 1, 9),
    ];
    host.with_slice_mut::<u8, _>(|s| {
        for &(i, v) in &writes {
            s[i] = v;
        }
    })
    .unwrap();
    host.with_slice::<u8, _>(|s| {
        for &(i, v) in &writes {
            assert_eq!(s[i], v, "element {i}");
        }
        assert_eq!(s[BOUND + 1], 0);
    })
    .unwrap();
    // The operators below run on the device under test (on the CPU `a` is `host` itself).
    let a = host.to_device(test_device()).unwrap();
    assert_eq!(a.device(), test_device());

    // Slice across the boundary: [2^31 - 2, 2^31 + 3).
    let b = BOUND as i64;
    let s = a.slice_axis(0, Some(b - 2), Some(b + 3), 1).unwrap();
    assert_eq!(s.to_vec::<u8>().unwrap(), vec![0, 200, 1, 0, 0]);
    // Negative bounds count from the end: the last 1000 elements start exactly at 2^31.
    let tail = a.slice_axis(0, Some(-1000), None, 1).unwrap();
    assert_eq!(tail.shape(), vec![1000]);
    assert_eq!(
        tail.sum(None, false).unwrap().to_vec::<i64>().unwrap(),
        vec![1 + 255 + 7 + 9]
    );
    // A strided slice stepping over the boundary.
    let st = a.slice_axis(0, Some(b - 1), Some(b + 18), 9).unwrap();
    assert_eq!(st.to_vec::<u8>().unwrap(), vec![200, 0, 255]);
    let st = a.slice_axis(0, Some(b + 17), Some(b - 2), -1).unwrap();
    assert_eq!(st.size(), 19);
    let v = st.to_vec::<u8>().unwrap();
    assert_eq!((v[0], v[17], v[18]), (255, 1, 200));

    // Sum of u8 accumulates into i64 (documented on `sum`): exact, no overflow.
    let total = a.sum(None, false).unwrap();
    assert_eq!(total.dtype(), DType::I64);
    let expect: i64 = writes.iter().map(|&(_, v)| v as i64).sum();
    assert_eq!(total.to_vec::<i64>().unwrap(), vec![expect]);

    let am = a.argmax(None, false).unwrap();
    assert_eq!(am.to_vec::<i64>().unwrap(), vec![(BOUND + 17) as i64]);
    assert_eq!(
        a.max(None, false).unwrap().to_vec::<u8>().unwrap(),
        vec![255]
    );
    // Reading one element past the boundary through take with an i64 index.
    let idx = NDArray::from_vec(vec![(BOUND + 500) as i64, -1], &[2]).unwrap();
    assert_eq!(a.take(&idx, 0).unwrap().to_vec::<u8>().unwrap(), vec![7, 9]);
}
}
