//! Global-norm clipping on the gradients of the language-model pattern: an Embedding with a
//! row_sparse gradient feeding an LSTM. `clip_global_norm` must count the LSTM's dense
//! gradients and the embedding's stored rows, and scale all of them by one factor.

use sparrow_core::{autograd, device_test, testing, DType, Device, NDArray, SType};
use sparrow_nn::{Block, Embedding, Initializer, LSTM};
use sparrow_optim::clip_global_norm;

device_test! {
    fn clip_global_norm_on_embedding_and_lstm_grads() {
        let (vocab, edim, hidden) = (10, 3, 4);
        let ids = NDArray::from_vec(vec![1.0f64, 4., 4., 7., 1., 2.], &[3, 2]).unwrap();
        let emb = Embedding::with_options(vocab, edim, true, DType::F64);
        let lstm = LSTM::new(hidden).num_layers(2).dtype(DType::F64);
        let init = Initializer::Uniform { scale: 0.6 };
        emb.initialize(&init, Device::current()).unwrap();
        lstm.initialize(&init, Device::current()).unwrap();
        let r = testing::test_array(&[3, 2, hidden], -1.0, 1.0, 9);
        let loss = autograd::record(|| lstm.forward(&emb.forward(&ids)?)?.mul(&r)?.sum_all())
            .unwrap();
        loss.backward().unwrap();
        let mut grads: Vec<NDArray> = lstm
            .collect_params()
            .unwrap()
            .iter()
            .map(|(_, p)| p.grad().unwrap())
            .collect();
        assert_eq!(grads.len(), 8);
        grads.push(emb.weight().grad().unwrap());
        assert_eq!(grads[8].stype(), SType::RowSparse);
        let sq = |gs: &[NDArray]| -> f64 {
            gs.iter()
                .map(|g| g.to_f64_vec().iter().map(|v| v * v).sum::<f64>())
                .sum()
        };
        let before = sq(&grads).sqrt();
        assert!(before > 0.1, "the test needs a norm above the threshold, got {before}");
        let copies: Vec<Vec<f64>> = grads.iter().map(|g| g.to_f64_vec()).collect();
        let norm = clip_global_norm(&grads, 0.1).unwrap();
        assert!((norm - before).abs() < 1e-9 * before, "{norm} vs {before}");
        let after = sq(&grads).sqrt();
        assert!((after - 0.1).abs() < 1e-6, "norm after clipping {after}");
        let scale = 0.1 / (before + 1e-8);
        for (g, c) in grads.iter().zip(&copies) {
            for (a, b) in g.to_f64_vec().iter().zip(c) {
                assert!((a - b * scale).abs() < 1e-12);
            }
        }
        assert_eq!(grads[8].stype(), SType::RowSparse);
        // Below the threshold nothing changes.
        let kept: Vec<Vec<f64>> = grads.iter().map(|g| g.to_f64_vec()).collect();
        clip_global_norm(&grads, 1.0).unwrap();
        for (g, k) in grads.iter().zip(&kept) {
            assert_eq!(&g.to_f64_vec(), k);
        }
    }
}
