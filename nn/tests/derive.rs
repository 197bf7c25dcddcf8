//! `#[derive(Block)]`: names from fields (nested blocks, `Option`, `Vec`, skipped fields),
//! the kind, several inputs and outputs, saved parameter names, and the error of a derived
//! block without an inherent `forward`.

use sparrow_core::testing::test_array;
use sparrow_core::{autograd, device_test, DType, Device, NDArray, Result};
use sparrow_nn::{Block, BlockIo, Dense, Initializer, Parameter, Sequential, SparseEmbedding};

#[derive(Block)]
struct Encoder {
    dense0: Dense,
    dense1: Dense,
}

impl Encoder {
    fn new() -> Encoder {
        Encoder {
            dense0: Dense::new(8).activation("relu"),
            dense1: Dense::new(4),
        }
    }
    fn forward(&self, x: &NDArray) -> Result<NDArray> {
        self.dense1.forward(&self.dense0.forward(x)?)
    }
}

/// Two inputs, two outputs; every kind of field.
#[derive(Block)]
#[block(inputs = 2, kind = "towers")]
struct Towers {
    encoder: Encoder,
    heads: Vec<Dense>,
    scale: Parameter,
    extra: Option<Dense>,
    missing: Option<Dense>,
    #[block(skip)]
    note: String,
}

impl Towers {
    fn new() -> Towers {
        Towers {
            encoder: Encoder::new(),
            heads: vec![Dense::new(1).in_units(4), Dense::new(2).in_units(4)],
            scale: Parameter::new("scale", &[1]).with_init(Initializer::Constant(2.0)),
            extra: Some(Dense::new(4).in_units(3)),
            missing: None,
            note: "not registered".into(),
        }
    }
    fn forward(&self, a: &NDArray, b: &NDArray) -> Result<(NDArray, NDArray)> {
        let extra = self.extra.as_ref().expect("built with an extra tower");
        let h = self.encoder.forward(a)?.add(&extra.forward(b)?)?;
        let s = self.scale.data()?;
        Ok((
            self.heads[0].forward(&h)?.mul(&s)?,
            self.heads[1].forward(&h)?,
        ))
    }
}

const NAMES: [&str; 11] = [
    "scale",
    "encoder.dense0.weight",
    "encoder.dense0.bias",
    "encoder.dense1.weight",
    "encoder.dense1.bias",
    "heads.0.weight",
    "heads.0.bias",
    "heads.1.weight",
    "heads.1.bias",
    "extra.weight",
    "extra.bias",
];

fn inputs() -> [NDArray; 2] {
    [
        test_array(&[3, 5], -1.0, 1.0, 1)
            .astype(DType::F32)
            .unwrap(),
        test_array(&[3, 3], -1.0, 1.0, 2)
            .astype(DType::F32)
            .unwrap(),
    ]
}

#[test]
fn names_are_hierarchical_from_the_fields() {
    let m = Towers::new();
    assert_eq!(m.note, "not registered");
    assert_eq!(m.kind(), "towers");
    assert_eq!(Encoder::new().kind(), "encoder");
    assert_eq!(m.collect_params().unwrap().names(), NAMES.to_vec());
    let kids: Vec<String> = m.children().into_iter().map(|(n, _)| n).collect();
    assert_eq!(kids, vec!["encoder", "heads.0", "heads.1", "extra"]);
    // Kinds name derived blocks inside a Sequential.
    let mut net = Sequential::new();
    net.add(Encoder::new()).add(Encoder::new());
    assert_eq!(
        net.collect_params().unwrap().names()[..3].to_vec(),
        vec![
            "encoder0.dense0.weight",
            "encoder0.dense0.bias",
            "encoder0.dense1.weight"
        ]
    );
    assert!(net
        .collect_params()
        .unwrap()
        .names()
        .contains(&"encoder1.dense1.bias".to_string()));
}

device_test! {
fn forward_inherent_and_through_the_trait() {
    let m = Towers::new();
    m.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let [a, b] = inputs();
    // The inherent method, typed, as a user calls it.
    let (y0, y1) = m.forward(&a, &b).unwrap();
    assert_eq!((y0.shape(), y1.shape()), (vec![3, 1], vec![3, 2]));
    // The trait's, as containers and fit call it: the same outputs.
    let dynm: &dyn Block = &m;
    let out = dynm.forward_multi(&[a.clone(), b.clone()]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), y0.to_vec::<f32>().unwrap());
    assert_eq!(out[1].to_vec::<f32>().unwrap(), y1.to_vec::<f32>().unwrap());
    let err = dynm.forward_multi(std::slice::from_ref(&a)).unwrap_err().to_string();
    assert_eq!(err, "towers: invalid argument: takes 2 inputs, got 1");
    let err = dynm.forward(&a).unwrap_err().to_string();
    assert!(err.contains("takes 2 inputs, got 1"), "{err}");
    // A one-input derived block inside a Sequential.
    let mut net = Sequential::new();
    net.add(Encoder::new()).add(Dense::new(1));
    net.initialize(&Initializer::xavier(), Device::current()).unwrap();
    assert_eq!(net.forward(&a).unwrap().shape(), vec![3, 1]);
    let s = net.summary(&a).unwrap();
    assert!(
        s.lines().any(|l| l.starts_with("sequential.encoder0 encoder ") && l.contains(" [3, 4] ")),
        "{s}"
    );

    // Every parameter gets a gradient.
    let l = autograd::record(|| {
        let (y0, y1) = m.forward(&a, &b)?;
        y0.sum_all()?.add(&y1.sum_all()?)
    })
    .unwrap();
    l.backward().unwrap();
    for (n, p) in m.collect_params().unwrap().iter() {
        assert!(p.grad().is_some(), "{n} has no gradient");
    }
}
}

device_test! {
fn saved_names_are_the_hierarchical_names_and_load_back() {
    let dir = std::env::temp_dir().join(format!("sparrow-derive-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("towers-{:?}.safetensors", Device::current()).replace(['(', ')'], ""));
    let [a, b] = inputs();
    let m = Towers::new();
    m.initialize(&Initializer::xavier(), Device::current()).unwrap();
    let (want, _) = m.forward(&a, &b).unwrap();
    m.save_parameters(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut saved: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    saved.sort();
    let mut names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    names.sort();
    assert_eq!(saved, names);
    // A fresh model, other weights, loads them and computes the same.
    let m2 = Towers::new();
    m2.initialize(&Initializer::Normal { sigma: 3.0 }, Device::current()).unwrap();
    m2.forward(&a, &b).unwrap();
    m2.load_parameters(&path).unwrap();
    let (got, _) = m2.forward(&a, &b).unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    std::fs::remove_file(&path).unwrap();
}
}

/// Matrix factorization as users write it: two embeddings, two id inputs.
#[derive(Block)]
#[block(inputs = 2)]
struct MatrixFactorization {
    user: SparseEmbedding,
    item: SparseEmbedding,
}

impl MatrixFactorization {
    fn forward(&self, users: &NDArray, items: &NDArray) -> Result<NDArray> {
        self.user
            .forward(users)?
            .mul(&self.item.forward(items)?)?
            .sum(Some(&[1]), false)
    }
}

device_test! {
fn two_embeddings_two_inputs_row_sparse_gradients() {
    let mf = MatrixFactorization { user: SparseEmbedding::new(10, 4), item: SparseEmbedding::new(7, 4) };
    mf.initialize(&Initializer::Normal { sigma: 0.1 }, Device::current()).unwrap();
    assert_eq!(mf.collect_params().unwrap().names(), vec!["user.weight", "item.weight"]);
    let users = NDArray::from_vec(vec![1.0f32, 3.0, 3.0], &[3]).unwrap();
    let items = NDArray::from_vec(vec![0.0f32, 6.0, 2.0], &[3]).unwrap();
    let l = autograd::record(|| mf.forward(&users, &items)?.sum_all()).unwrap();
    l.backward().unwrap();
    let g = mf.user.weight().grad().unwrap();
    assert_eq!(g.stype(), sparrow_core::SType::RowSparse);
    assert_eq!(g.row_ids().unwrap(), vec![1, 3]);
    let g = mf.item.weight().grad().unwrap();
    assert_eq!(g.row_ids().unwrap(), vec![0, 2, 6]);
}
}

/// A derived block whose author forgot the inherent `forward`.
#[derive(Block)]
struct Forgot {
    dense: Dense,
}

#[test]
fn a_derived_block_without_forward_is_an_error() {
    let f = Forgot {
        dense: Dense::new(2).in_units(2),
    };
    f.initialize(&Initializer::xavier(), Device::Cpu).unwrap();
    assert_eq!(
        f.collect_params().unwrap().names(),
        vec!["dense.weight", "dense.bias"]
    );
    let x = NDArray::ones(&[1, 2], DType::F32).unwrap();
    let err = f.forward(&x).unwrap_err().to_string();
    assert!(
        err.contains("implements neither Block::forward nor Block::forward_multi"),
        "{err}"
    );
}
