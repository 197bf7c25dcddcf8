//! `stored_sum_sq` and `scale_stored` on every storage type.

use crate::update::{scale_stored, stored_sum_sq};
use crate::{device_test, DType, NDArray, SType};

use super::on_device;

device_test! {
    fn sum_of_squares_counts_stored_values_of_every_storage_type() {
        let d = on_device(NDArray::from_vec(vec![3.0f32, 0.0, -4.0], &[3]).unwrap());
        assert_eq!(stored_sum_sq(&d).unwrap(), 25.0);
        let d64 = on_device(NDArray::from_vec(vec![1.5f64, 2.0], &[2]).unwrap());
        assert_eq!(stored_sum_sq(&d64).unwrap(), 6.25);
        let r = NDArray::row_sparse_from_parts(vec![1.0f32, 2.0, 2.0, 0.0], vec![1, 5], &[6, 2]);
        let r = on_device(r.unwrap());
        assert_eq!(stored_sum_sq(&r).unwrap(), 9.0);
        let dense = vec![0.0f64, 2.0, 0.0, 1.0, 0.0, 0.0, 3.0, 0.0];
        let c = on_device(NDArray::from_vec(dense, &[4, 2]).unwrap())
            .tostype(SType::Csr)
            .unwrap();
        assert_eq!(stored_sum_sq(&c).unwrap(), 14.0);
        // A row slice shares its parent's values: only its own count.
        assert_eq!(stored_sum_sq(&c.slice_rows(1, 3).unwrap()).unwrap(), 1.0);
        let i = on_device(NDArray::from_vec(vec![1i64, 2], &[2]).unwrap());
        let e = stored_sum_sq(&i).unwrap_err().to_string();
        assert!(
            e.contains("stored_sum_sq") && e.contains("float32 or float64"),
            "{e}"
        );
    }
}

device_test! {
    fn scaling_keeps_the_storage_type_and_only_touches_stored_values() {
        let d = on_device(NDArray::from_vec(vec![2.0f32, -4.0], &[2]).unwrap());
        scale_stored(&d, 0.5).unwrap();
        assert_eq!(d.to_vec::<f32>().unwrap(), vec![1.0, -2.0]);
        let r = NDArray::row_sparse_from_parts(vec![1.0f64, 2.0], vec![2], &[3, 2]);
        let r = on_device(r.unwrap());
        scale_stored(&r, 3.0).unwrap();
        assert_eq!(r.stype(), SType::RowSparse);
        assert_eq!(
            r.to_vec::<f64>().unwrap(),
            vec![0.0, 0.0, 0.0, 0.0, 3.0, 6.0]
        );
        let dense = vec![0.0f32, 2.0, 4.0, 0.0, 0.0, 6.0];
        let c = on_device(NDArray::from_vec(dense, &[3, 2]).unwrap())
            .tostype(SType::Csr)
            .unwrap();
        let tail = c.slice_rows(1, 3).unwrap();
        scale_stored(&tail, 0.5).unwrap();
        assert_eq!(tail.stype(), SType::Csr);
        assert_eq!(tail.to_vec::<f32>().unwrap(), vec![2.0, 0.0, 0.0, 3.0]);
        // The parent, which shared the values, is unchanged.
        assert_eq!(
            c.to_vec::<f32>().unwrap(),
            vec![0.0, 2.0, 4.0, 0.0, 0.0, 6.0]
        );
        let i = on_device(NDArray::from_vec(vec![1i64, 2], &[2]).unwrap());
        assert!(scale_stored(&i, 2.0).is_err());
        assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, 2]);
        assert!(scale_stored(&d, f64::NAN).is_err());
        let empty = on_device(NDArray::zeros(&[0], DType::F64).unwrap());
        assert!(scale_stored(&empty, 2.0).is_ok());
    }
}
