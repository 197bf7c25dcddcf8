//! `Dense` holds one weight layout, `(in_units, units)`, whatever its gradient's storage type,
//! so a model's parameter file does not depend on it; a Gluon/PyTorch `(units, in_units)`
//! weight file is transposed on load; a weight that fits neither orientation is an error.

use safetensors::SafeTensors;
use sparrow_core::{Device, NDArray, SType};
use sparrow_nn::{
    load_params, save_params, Block, BlockIo, Dense, Initializer, LoadOptions, ParamDict,
    Parameter, SaveOptions,
};

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sparrow-dense-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `(shape, layout metadata)` of `name` in a parameter file.
fn entry(path: &std::path::Path, name: &str) -> (Vec<usize>, Option<String>) {
    let bytes = std::fs::read(path).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let layout = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get(&format!("layout:{name}")).cloned());
    (st.tensor(name).unwrap().shape().to_vec(), layout)
}

#[test]
fn one_layout_for_dense_and_row_sparse_gradients() {
    let (units, ins) = (3, 5);
    let plain = Dense::new(units).in_units(ins);
    let sparse = Dense::new(units).in_units(ins).grad_stype(SType::RowSparse);
    for d in [&plain, &sparse] {
        d.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
        assert_eq!(d.weight().shape(), vec![ins, units]);
        assert_eq!(d.weight().data().unwrap().shape(), vec![ins, units]);
    }
    let (a, b) = (tmp("plain.safetensors"), tmp("sparse.safetensors"));
    plain.save_parameters(&a).unwrap();
    sparse.save_parameters(&b).unwrap();
    let want = (vec![ins, units], Some("in_out".to_string()));
    assert_eq!(entry(&a, "weight"), want);
    assert_eq!(entry(&b, "weight"), want);
    // The files are interchangeable with no conversion: the weights arrive as they are.
    sparse.load_parameters(&a).unwrap();
    assert_eq!(
        sparse.weight().data().unwrap().to_vec::<f32>().unwrap(),
        plain.weight().data().unwrap().to_vec::<f32>().unwrap()
    );
}

#[test]
fn a_gluon_layout_file_is_transposed_on_load() {
    let (units, ins) = (2, 3);
    // What Gluon or PyTorch saves: weight (units, in_units), no layout key.
    let wg: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let mut gluon = ParamDict::new();
    let w = Parameter::new("weight", &[units, ins]);
    w.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    w.set_data(&NDArray::from_vec(wg.clone(), &[units, ins]).unwrap())
        .unwrap();
    let b = Parameter::new("bias", &[units]);
    b.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    b.set_data(&NDArray::from_vec(vec![0.5f32, -0.5], &[units]).unwrap())
        .unwrap();
    gluon.insert("weight".into(), w).unwrap();
    gluon.insert("bias".into(), b).unwrap();
    let path = tmp("gluon.safetensors");
    save_params(&gluon, &path, SaveOptions::default()).unwrap();
    assert_eq!(entry(&path, "weight"), (vec![units, ins], None));

    for stype in [SType::Dense, SType::RowSparse] {
        let d = Dense::new(units).in_units(ins).grad_stype(stype);
        d.initialize(&Initializer::Zero, Device::Cpu).unwrap();
        d.load_parameters(&path).unwrap();
        // Held (in, out): the Gluon weight's transpose.
        assert_eq!(
            d.weight().data().unwrap().to_vec::<f32>().unwrap(),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        // y = x W_gluon^T + b, as in Gluon.
        let x = NDArray::from_vec(vec![1.0f32, 0.0, -1.0], &[1, ins]).unwrap();
        let y = d.forward(&x).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(y, vec![1.0 - 3.0 + 0.5, 4.0 - 6.0 - 0.5]);
    }
}

#[test]
fn a_weight_fitting_neither_orientation_is_an_error() {
    let mut p = ParamDict::new();
    let w = Parameter::new("weight", &[4, 4]);
    w.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    p.insert("weight".into(), w).unwrap();
    let path = tmp("square.safetensors");
    save_params(&p, &path, SaveOptions::default()).unwrap();
    let d = Dense::new(2).in_units(3).use_bias(false);
    d.initialize(&Initializer::Zero, Device::Cpu).unwrap();
    let err = d.load_parameters(&path).unwrap_err().to_string();
    assert!(err.contains("weight"), "{err}");
    // Nothing was assigned.
    assert!(d
        .weight()
        .data()
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|&v| v == 0.0));
    // The same through load_params, with unknown tensors allowed: still the shape error.
    let opts = LoadOptions {
        ignore_extra: true,
        ..Default::default()
    };
    assert!(load_params(&d.collect_params().unwrap(), &path, opts).is_err());
}
