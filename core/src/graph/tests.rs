use super::*;
use crate::{autograd, NDArray};

fn arr(v: &[f32], shape: &[usize]) -> NDArray {
    NDArray::from_vec(v.to_vec(), shape).unwrap()
}

/// `relu(x . w^T + b).sum(axis 1)`, the shape of a small Dense layer and a reduction.
fn forward(x: &NDArray, w: &NDArray, b: &NDArray) -> crate::Result<NDArray> {
    let y = x.dot_t(w, false, true)?;
    let y = crate::ops::fused::bias_act_absorbing(
        &y,
        b,
        crate::ops::fused::FusedAct::from_name("relu"),
    )?
    .expect("dense operands");
    y.mul_scalar(0.5)?.sum(Some(&[1]), false)
}

fn names() -> Vec<String> {
    vec!["x".to_string()]
}

/// The graph of `f(x, w)`: input `x`, parameter `w`, one output.
fn graph_of_xw(
    x: &NDArray,
    w: &NDArray,
    f: &dyn Fn(&NDArray, &NDArray) -> crate::Result<NDArray>,
) -> Graph {
    let (out, log) = trace(|| f(x, w)).unwrap();
    Graph::from_trace(
        log,
        &names(),
        std::slice::from_ref(x),
        &[out.unwrap()],
        &[("w".to_string(), w.clone())],
    )
    .unwrap()
}

#[test]
fn traced_graph_replays_eager_values_and_gradients() {
    let x = arr(&[1., -2., 3., 0.5, 1., -1.], &[2, 3]);
    let w = arr(
        &[
            0.1, 0.2, -0.3, 0.4, -0.5, 0.6, 0.7, 0.8, -0.9, 1.0, 0.0, 0.1,
        ],
        &[4, 3],
    );
    let b = arr(&[0.1, -0.2, 0.3, 0.0], &[4]);
    w.attach_grad();
    b.attach_grad();
    let (out, log) = trace(|| forward(&x, &w, &b)).unwrap();
    let out = out.unwrap();
    assert_eq!(log.len(), 4);
    let params = vec![("w".to_string(), w.clone()), ("b".to_string(), b.clone())];
    let g = Graph::from_trace(
        log,
        &names(),
        std::slice::from_ref(&x),
        std::slice::from_ref(&out),
        &params,
    )
    .unwrap();
    let ops: Vec<&str> = g.nodes().iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["dot", "bias_act", "mul_scalar", "sum"]);
    assert_eq!(g.params().len(), 2);
    // A different batch through the graph equals eager on that batch, gradients included.
    let x2 = arr(&[0.3, 2., -1., 1.5, -1., 2.], &[2, 3]);
    let eager = autograd::record(|| forward(&x2, &w, &b)?.sum_all()).unwrap();
    eager.backward().unwrap();
    let (gw, gb) = (
        w.grad().unwrap().to_f64_vec(),
        b.grad().unwrap().to_f64_vec(),
    );
    let hy = autograd::record(|| {
        g.run(std::slice::from_ref(&x2), &[w.clone(), b.clone()])?[0].sum_all()
    })
    .unwrap();
    assert_eq!(hy.to_f64_vec(), eager.to_f64_vec());
    hy.backward().unwrap();
    assert_eq!(w.grad().unwrap().to_f64_vec(), gw);
    assert_eq!(b.grad().unwrap().to_f64_vec(), gb);
}

#[test]
fn untraceable_forwards_are_named() {
    let x = arr(&[1., 2.], &[2]);
    // A constant made inside the forward.
    let (out, log) = trace(|| x.add(&NDArray::ones(&[2], Default::default())?)).unwrap();
    let err = Graph::from_trace(
        log,
        &names(),
        std::slice::from_ref(&x),
        &[out.unwrap()],
        &[],
    )
    .unwrap_err();
    assert!(err.contains("neither an input, a parameter"), "{err}");
    // Data-dependent control flow: a host read decides what to compute.
    let (out, log) = trace(|| {
        if x.to_vec::<f32>()?[0] > 0.0 {
            x.relu()
        } else {
            x.neg()
        }
    })
    .unwrap();
    let err = Graph::from_trace(
        log,
        &names(),
        std::slice::from_ref(&x),
        &[out.unwrap()],
        &[],
    )
    .unwrap_err();
    assert!(err.contains("on the host (to_vec)"), "{err}");
    // A block that declares itself not traceable.
    let (_, log) = trace(|| not_traceable("Dropout", "draws a random mask")).unwrap();
    assert_eq!(log.problem(), Some("Dropout: draws a random mask"));
    // Nested traces are refused.
    let nested = trace(|| trace(|| ()).is_err()).unwrap().0;
    assert!(nested);
    assert!(!is_tracing());
}

#[test]
fn crafted_graphs_are_rejected() {
    let v = |s: &[usize]| ValueInfo {
        shape: s.to_vec(),
        dtype: crate::DType::F32,
        stype: crate::SType::Dense,
        bytes: s.iter().fold(4usize, |a, &d| a.saturating_mul(d)),
    };
    let relu = |i: usize, o: usize| Node {
        op: Op::Unary(UnaryFn::Relu),
        inputs: vec![i],
        output: o,
    };
    let ok = Graph::new(
        vec![v(&[2]), v(&[2])],
        names(),
        vec![0],
        vec![],
        vec![relu(0, 1)],
        vec![1],
    );
    assert!(ok.is_ok());
    let cases: Vec<(Graph2, &str)> = vec![
        (
            (vec![v(&[2]), v(&[2])], vec![0], vec![relu(1, 1)], vec![1]),
            "before it is defined",
        ),
        (
            (vec![v(&[2]), v(&[2])], vec![0], vec![relu(0, 5)], vec![1]),
            "has 2 values",
        ),
        (
            (vec![v(&[2]), v(&[2])], vec![0], vec![relu(0, 0)], vec![1]),
            "second time",
        ),
        (
            (vec![v(&[2]), v(&[2])], vec![0], vec![relu(0, 1)], vec![]),
            "no outputs",
        ),
        (
            (
                vec![v(&[2]), v(&[2]), v(&[2])],
                vec![0],
                vec![relu(0, 1)],
                vec![1],
            ),
            "never defined",
        ),
        (
            (
                vec![v(&[2]), v(&[2])],
                vec![0],
                vec![Node {
                    op: Op::Binary(crate::ops::BinaryOp::Add),
                    inputs: vec![0],
                    output: 1,
                }],
                vec![1],
            ),
            "the operator takes 2",
        ),
        (
            (
                vec![v(&[usize::MAX, 4]), v(&[2])],
                vec![0],
                vec![relu(0, 1)],
                vec![1],
            ),
            "too large",
        ),
    ];
    for ((values, inputs, nodes, outputs), want) in cases {
        let err = Graph::new(values, names(), inputs, vec![], nodes, outputs)
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err} (wanted '{want}')");
    }
    // A graph that lies about a shape fails at that node when run.
    let liar = Graph::new(
        vec![v(&[2]), v(&[3])],
        names(),
        vec![0],
        vec![],
        vec![relu(0, 1)],
        vec![1],
    )
    .unwrap();
    let err = liar
        .run(&[arr(&[1., 2.], &[2])], &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("node 0 (relu) produced"), "{err}");
    // And inputs of another signature are refused.
    let g = ok.unwrap();
    let err = g
        .run(&[arr(&[1., 2., 3.], &[3])], &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("input 'x'"), "{err}");
}

type Graph2 = (Vec<ValueInfo>, Vec<usize>, Vec<Node>, Vec<usize>);

#[test]
fn attributes_round_trip() {
    let ops = vec![
        Op::Scalar(ScalarFn::Mul, 0.5),
        Op::Reshape(vec![2, 3]),
        Op::Sum {
            axes: Some(vec![-1]),
            keepdims: true,
        },
        Op::Mean {
            axes: None,
            keepdims: false,
        },
        Op::Dot {
            ta: false,
            tb: true,
        },
        Op::BiasAct {
            act: crate::ops::fused::FusedAct::from_name("tanh"),
            absorb: true,
        },
        Op::OneHot {
            depth: 4,
            on: 1.0,
            off: 0.0,
            dtype: crate::DType::F64,
        },
        Op::CompareScalar(CmpFn::Gt, 1.5),
        Op::CheckClassIds {
            classes: 3,
            count: 7,
        },
        Op::Unary(UnaryFn::Softrelu),
        Op::Conv {
            params: crate::ops::ConvParams::new()
                .stride(&[2, 1])
                .padding(&[1])
                .dilation(&[1, 2])
                .groups(2),
            bias: true,
        },
        Op::ConvTranspose(
            crate::ops::ConvParams::new()
                .stride(&[2])
                .output_padding(&[1]),
        ),
        Op::Pool(
            crate::ops::PoolParams::new(crate::ops::PoolType::Avg, &[3, 2])
                .stride(&[2])
                .padding(&[1])
                .ceil_mode(true)
                .count_include_pad(false),
        ),
        Op::Pool(crate::ops::PoolParams::global(crate::ops::PoolType::Max)),
        Op::RunningUpdate { momentum: 0.9 },
        Op::SoftmaxCe,
        Op::SoftmaxCeIds,
        Op::SigmoidBceTo(vec![4]),
        Op::Transpose(vec![1, 0, 2]),
        Op::Concat { axis: 2, n: 3 },
        Op::SliceAxis {
            axis: 1,
            begin: 4,
            step: -2,
            len: 3,
        },
        Op::RnnSequence {
            mode: crate::ops::rnn::RnnMode::Gru,
            reverse: true,
            zero_state: false,
        },
        Op::RnnSequence {
            mode: crate::ops::rnn::RnnMode::RnnRelu,
            reverse: false,
            zero_state: true,
        },
    ];
    for op in ops {
        let attrs: Vec<(String, AttrValue)> = op
            .attrs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(Op::from_attrs(op.name(), &attrs).unwrap(), op);
    }
    // A dropout mask comes back with its rate and seed, as a stream of its own (streams
    // compare by identity), all 64 bits of the seed kept.
    let stream = crate::ops::MaskStream::new(u64::MAX - 5);
    let op = Op::DropoutMask {
        p: 0.25,
        stream: stream.clone(),
    };
    let attrs: Vec<(String, AttrValue)> = op
        .attrs()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    match Op::from_attrs(op.name(), &attrs).unwrap() {
        Op::DropoutMask { p, stream: s } => {
            assert_eq!((p, s.seed(), s.drawn()), (0.25, stream.seed(), 0));
            assert!(!std::sync::Arc::ptr_eq(&s, &stream));
        }
        other => panic!("{other:?}"),
    }
    let bad = [("p".to_string(), AttrValue::Float(1.0)), attrs[1].clone()];
    let err = Op::from_attrs("dropout_mask", &bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("'p'"), "{err}");
    let err = Op::from_attrs("reshape", &[]).unwrap_err().to_string();
    assert!(err.contains("needs attribute 'shape'"), "{err}");
    // Attributes a file could hold but no traced operator has.
    let int = |k: &str, v: i64| (k.to_string(), AttrValue::Int(v));
    let err = Op::from_attrs("transpose", &[("axes".into(), AttrValue::Ints(vec![0, 0]))])
        .unwrap_err()
        .to_string();
    assert!(err.contains("permutation"), "{err}");
    let slice = [
        int("axis", 0),
        int("begin", 0),
        int("step", 0),
        int("len", 2),
    ];
    let err = Op::from_attrs("slice_axis", &slice)
        .unwrap_err()
        .to_string();
    assert!(err.contains("'step'"), "{err}");
    let err = Op::from_attrs("concat", &[int("axis", 0), int("num_args", 0)])
        .unwrap_err()
        .to_string();
    assert!(err.contains("'num_args'"), "{err}");
    let rnn = [
        ("mode".to_string(), AttrValue::Str("elman".into())),
        ("reverse".to_string(), AttrValue::Bool(false)),
        ("zero_state".to_string(), AttrValue::Bool(true)),
    ];
    let err = Op::from_attrs("rnn_sequence", &rnn)
        .unwrap_err()
        .to_string();
    assert!(err.contains("'mode'"), "{err}");
    let err = Op::from_attrs("launch_missiles", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown operator"), "{err}");
}

#[test]
fn memory_plan_shares_buffers_of_a_chain() {
    // x -> tanh -> mul_scalar -> ... : every step can reuse the dying buffer.
    let x = arr(&[0.5; 64], &[8, 8]);
    let (out, log) = trace(|| {
        let mut h = x.clone();
        for _ in 0..10 {
            h = h.dot_t(&x, false, false)?.tanh()?;
        }
        Ok::<_, crate::Error>(h)
    })
    .unwrap();
    let g = Graph::from_trace(
        log,
        &names(),
        std::slice::from_ref(&x),
        &[out.unwrap()],
        &[],
    )
    .unwrap();
    let plan = MemoryPlan::of(&g);
    assert_eq!(plan.total_bytes, 20 * 256);
    assert_eq!(plan.in_place, 10);
    // Two buffers ping-pong through the chain.
    assert_eq!(plan.planned_bytes(), 2 * 256);
    assert!(plan.live_peak_bytes <= 3 * 256);
}

#[test]
fn recompute_clones_producers_into_the_backward_and_keeps_the_results() {
    // loss = sum(tanh(tanh(tanh(x . w)))): the backward reads every tanh output.
    let x = arr(&[0.25; 16], &[4, 4]);
    let w = arr(&[0.5; 16], &[4, 4]);
    let g = graph_of_xw(&x, &w, &|x, w| {
        x.dot_t(w, false, false)?.tanh()?.tanh()?.tanh()?.sum_all()
    });
    let b = super::backward_graph(&g).unwrap();
    let n = b.graph.nodes().len();
    let err = super::with_recompute(&b.graph, n + 1, super::Recompute::Sqrt).unwrap_err();
    assert!(err.contains("forward nodes"), "{err}");
    let (same, p) =
        super::with_recompute(&b.graph, b.forward_nodes, super::Recompute::Off).unwrap();
    assert_eq!(same, b.graph);
    assert_eq!(p.dropped, 0);
    let all = super::Recompute::Budget(usize::MAX);
    let (r, p) = super::with_recompute(&b.graph, b.forward_nodes, all).unwrap();
    // Nothing the backward reads is kept: every tanh (and the product) is cloned, and the
    // backward reads only clones or the caller's arrays.
    assert_eq!(p.kept, 0);
    assert!(p.dropped >= 3 && p.cloned_nodes >= 4, "{p:?}");
    assert_eq!(r.nodes().len(), n + p.cloned_nodes);
    let fwd_out: Vec<usize> = r.nodes()[..b.forward_nodes]
        .iter()
        .map(|n| n.output)
        .collect();
    for node in &r.nodes()[b.forward_nodes..] {
        for x in &node.inputs {
            assert!(
                !fwd_out.contains(x),
                "a backward node reads forward value {x}"
            );
        }
    }
    let head = crate::NDArray::ones(&[], crate::DType::F32).unwrap();
    let ins = [x.clone(), head];
    let want = b.graph.run(&ins, std::slice::from_ref(&w)).unwrap();
    let got = r.run(&ins, std::slice::from_ref(&w)).unwrap();
    for (a, c) in want.iter().zip(&got) {
        assert_eq!(a.to_f64_vec(), c.to_f64_vec());
    }
}

#[test]
fn recorded_split_keeps_only_what_the_backward_reads_and_matches_the_joint_graph() {
    // loss = sum(tanh(x . w)) with gradients for w only, then for x and w.
    let x = arr(&[0.25, -0.5, 1.0, 0.75, 0.1, -0.2], &[2, 3]);
    let w = arr(&[0.5, -0.25, 0.1, 0.3, 0.2, -0.4], &[3, 2]);
    let g = graph_of_xw(&x, &w, &|x, w| x.dot(w)?.tanh()?.sum_all());
    let head = NDArray::ones(&[], crate::DType::F32).unwrap();
    for wrt in [[false, true], [true, true]] {
        let r = super::recorded::Recorded::new(&g, &wrt).unwrap();
        let (f, b) = (r.forward_graph(), r.backward_graph());
        // The forward returns the loss and the tanh output (the only value its backward
        // reads); the backward has no forward node.
        assert_eq!(f.outputs().len(), 2, "{wrt:?}");
        assert_eq!(f.nodes().len(), g.nodes().len());
        assert!(b.nodes().iter().all(|n| n.op.name() != "tanh"));
        assert_eq!(b.outputs().len(), wrt.iter().filter(|&&w| w).count());
        // The two halves give the joint graph's values.
        let joint = super::backward_graph_wrt(&g, &wrt[..1], &wrt[1..]).unwrap();
        let want = joint
            .graph
            .run(&[x.clone(), head.clone()], std::slice::from_ref(&w))
            .unwrap();
        let fo = f
            .run(std::slice::from_ref(&x), std::slice::from_ref(&w))
            .unwrap();
        assert_eq!(fo[0].to_f64_vec(), want[0].to_f64_vec());
        let mut bin = vec![fo[1].clone()];
        if b.inputs().len() == 3 {
            bin.push(x.clone());
        }
        bin.push(head.clone());
        let bp: Vec<NDArray> = if b.params().is_empty() {
            vec![]
        } else {
            vec![w.clone()]
        };
        let got = b.run(&bin, &bp).unwrap();
        for (a, c) in want[1..].iter().zip(&got) {
            assert_eq!(a.to_f64_vec(), c.to_f64_vec(), "{wrt:?}");
        }
    }
    // No gradient asked for anything: no split.
    assert!(super::recorded::Recorded::new(&g, &[false, false]).is_err());
}

#[test]
fn shape_and_sequence_nodes_refuse_operands_they_do_not_fit() {
    // A graph file can name any slice run or saved sequence: each is checked, not trusted.
    let x = arr(&[0.0; 4], &[4]);
    let run = |axis, begin, step, len| {
        Op::SliceAxis {
            axis,
            begin,
            step,
            len,
        }
        .apply(std::slice::from_ref(&x))
    };
    assert_eq!(run(0, 3, -1, 4).unwrap().shape(), vec![4]);
    for (axis, begin, step, len) in [(0, 3, 1, 2), (0, 1, -1, 3), (1, 0, 1, 1), (0, 4, 1, 1)] {
        let err = run(axis, begin, step, len).unwrap_err().to_string();
        assert!(err.contains("slice_axis"), "{err}");
    }
    let grad = GradFn::SliceAxis {
        axis: 0,
        begin: 0,
        step: 1,
        len: 3,
        in_shape: vec![4],
    };
    assert!(grad.apply(std::slice::from_ref(&x)).is_err());
    // A saved sequence must be (T + S + T * U, N, H) for its mode.
    let rnn = GradFn::Rnn {
        mode: crate::ops::rnn::RnnMode::Lstm,
        reverse: false,
        zero_state: true,
    };
    let saved = arr(&[0.0; 17 * 2], &[17, 1, 2]);
    let w = arr(&[0.0; 16], &[8, 2]);
    let err = rnn
        .apply(&[saved.clone(), saved.clone(), w.clone()])
        .unwrap_err()
        .to_string();
    assert!(err.contains("sequence with its workspace"), "{err}");
    let saved = arr(&[0.0; 18 * 2], &[18, 1, 2]); // T = 2: 2 + 2 + 2 * 7
    let g = arr(&[0.0; 17 * 2], &[17, 1, 2]);
    let err = rnn.apply(&[g, saved.clone(), w]).unwrap_err().to_string();
    assert!(err.contains("head gradient"), "{err}");
    let err = rnn
        .apply(&[saved.clone(), saved, arr(&[0.0; 8], &[4, 2])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("recurrent weight"), "{err}");
}

#[test]
fn softmax_ce_nodes_compose_the_loss_where_the_fused_kernels_decline() {
    // The fused kernels run on dense host operands of one float dtype; a graph's node meets
    // others where it is run elsewhere (a device) or handed them. Here: a csr target, ids of
    // another dtype than the logits', a row_sparse head gradient. The nodes then compose the
    // general operators, and must give what the fused kernels give on dense operands.
    use crate::graph::GradFn;
    use crate::testing::test_array;
    use crate::SType;
    let close = |a: &NDArray, b: &NDArray| {
        assert_eq!(a.shape(), b.shape());
        for (p, q) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            assert!((p - q).abs() <= 1e-12 * (1.0 + q.abs()), "{p} vs {q}");
        }
    };
    let x = test_array(&[4, 3], -2.0, 2.0, 1);
    let t = test_array(&[4, 3], 0.0, 1.0, 2);
    let ids = NDArray::from_vec(vec![2.0f64, 0.0, 1.0, 2.0], &[4]).unwrap();
    let g = NDArray::from_vec(vec![0.5f64, 0.0, -1.0, 0.0], &[4, 1]).unwrap();
    let t_csr = t.tostype(SType::Csr).unwrap();
    let ids_f32 = ids.astype(crate::DType::F32).unwrap();
    let g_rsp = g.tostype(SType::RowSparse).unwrap();
    for (op, t_fused, t_other, ids) in [
        (Op::SoftmaxCe, &t, &t_csr, false),
        (Op::SoftmaxCeIds, &ids, &ids_f32, true),
    ] {
        let fused = op.apply(&[x.clone(), t_fused.clone()]).unwrap();
        close(&op.apply(&[x.clone(), t_other.clone()]).unwrap(), &fused);
        let grad = GradFn::SoftmaxCe { ids };
        let dense = grad
            .apply(&[x.clone(), t_fused.clone(), g.clone()])
            .unwrap();
        close(
            &grad
                .apply(&[x.clone(), t_fused.clone(), g_rsp.clone()])
                .unwrap(),
            &dense,
        );
    }
}
