//! End to end through the JIT: memref descriptors, strided inputs, outputs written in place,
//! and errors from lowering surfacing with the node's name and source line.

mod common;

use common::*;
use fxmlir::graph::{Arg, DType, Source};
use fxmlir::{Error, Options, Target, compile};

fn run(g: &fxmlir::Graph, buffers: &mut [&mut [f32]]) {
    let compiled = compile(g, None, &Options::new(Target::host().unwrap())).expect("compiles");
    let pointers: Vec<usize> = buffers
        .iter_mut()
        .map(|b| b.as_mut_ptr() as usize)
        .collect();
    // SAFETY: each buffer matches the graph's metadata.
    unsafe { compiled.call(&pointers, None).expect("runs") };
}

#[test]
fn broadcast_add_with_alpha() {
    let g = broadcast_add("bcast", 2);
    let mut x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let mut y = [10.0, 20.0, 30.0];
    let mut out = [0.0f32; 6];
    run(&g, &mut [&mut x, &mut y, &mut out]);
    assert_eq!(out, [21.0, 42.0, 63.0, 24.0, 45.0, 66.0]);
}

#[test]
fn strided_input_is_read_through_its_strides() {
    // x is the transpose of a row-major 3x2 buffer: shape [2, 3], strides [1, 2].
    let g = graph(
        "strided",
        vec![input("x", strided(&[2, 3], &[1, 2], DType::Float32))],
        vec![node(
            "neg",
            "aten.neg.default",
            vec![r("x")],
            vec![meta(&[2, 3], DType::Float32)],
        )],
        &["neg"],
    );
    let mut base = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let mut out = [0.0f32; 6];
    run(&g, &mut [&mut base, &mut out]);
    assert_eq!(out, [-1.0, -3.0, -5.0, -2.0, -4.0, -6.0]);
}

#[test]
fn matmul_and_strided_output() {
    // out = x @ w written into a column-major ([1, 2]-strided) 2x2 buffer.
    let g = graph(
        "mm",
        vec![
            input("x", meta(&[2, 3], DType::Float32)),
            input("w", meta(&[3, 2], DType::Float32)),
        ],
        vec![node(
            "mm",
            "aten.mm.default",
            vec![r("x"), r("w")],
            vec![strided(&[2, 2], &[1, 2], DType::Float32)],
        )],
        &["mm"],
    );
    let mut x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let mut w = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
    let mut out = [0.0f32; 4];
    run(&g, &mut [&mut x, &mut w, &mut out]);
    // [[4, 5], [10, 11]] stored column-major.
    assert_eq!(out, [4.0, 10.0, 5.0, 11.0]);
}

#[test]
fn call_checks_the_buffer_count() {
    let g = unary("count", "aten.neg.default", &[2], &[2]);
    let compiled = compile(&g, None, &Options::new(Target::host().unwrap())).unwrap();
    // SAFETY: the call is rejected before any pointer is used.
    let err = unsafe { compiled.call(&[0], None) }.unwrap_err();
    assert!(err.to_string().contains("takes 2 buffers"), "{err}");
}

#[test]
fn unsupported_op_names_node_and_source() {
    let mut n = node(
        "fft",
        "aten.fft_fft.default",
        vec![r("x")],
        vec![meta(&[4], DType::Float32)],
    );
    n.source = Some(Source {
        file: "model.py".into(),
        line: 12,
        code: None,
    });
    let g = graph(
        "unsupported",
        vec![input("x", meta(&[4], DType::Float32))],
        vec![n],
        &["fft"],
    );
    let err = compile(&g, None, &Options::new(Target::host().unwrap()))
        .err()
        .expect("must fail");
    assert!(matches!(err, Error::UnsupportedOp(_)));
    let text = err.to_string();
    for needle in ["aten.fft_fft.default", "`fft`", "model.py:12"] {
        assert!(text.contains(needle), "`{text}` lacks `{needle}`");
    }
}

#[test]
fn lowering_errors_name_the_node() {
    let g = graph(
        "badperm",
        vec![input("x", meta(&[2, 3], DType::Float32))],
        vec![node(
            "permute",
            "aten.permute.default",
            vec![r("x"), Arg::List(vec![Arg::Int(0), Arg::Int(0)])],
            vec![meta(&[2, 2], DType::Float32)],
        )],
        &["permute"],
    );
    let err = compile(&g, None, &Options::new(Target::host().unwrap()))
        .err()
        .expect("must fail")
        .to_string();
    assert!(
        err.contains("`permute`") && err.contains("not a permutation"),
        "{err}"
    );
}

#[test]
fn wrong_recorded_output_type_is_caught() {
    let g = unary("badmeta", "aten.neg.default", &[2], &[3]);
    // The verifier rejects the mismatched loop bounds and points at the node.
    let err = compile(&g, None, &Options::new(Target::host().unwrap()))
        .err()
        .expect("must fail")
        .to_string();
    assert!(err.contains("aten.neg.default (neg)"), "{err}");
}

#[test]
fn dumps_every_stage() {
    let dir = std::env::temp_dir().join(format!("fxmlir-dumps-{}", std::process::id()));
    let g = unary("dumped", "aten.exp.default", &[4], &[4]);
    let options = Options {
        dump_dir: Some(dir.clone()),
        ..Options::new(Target::host().unwrap())
    };
    let compiled = compile(&g, Some("{}"), &options).unwrap();
    for suffix in [
        "fx.json",
        "00-input.mlir",
        "01-expand.mlir",
        "02-schedule.transform.mlir",
        "02-schedule.mlir",
        "03-fusion.mlir",
        "04-parallel.transform.mlir",
        "04-parallel.mlir",
        "05-bufferize.mlir",
        "06-outline.mlir",
        "07-loops.mlir",
        "08-llvm.mlir",
        "irdl.mlir",
        "ll",
    ] {
        let path = dir.join(format!("dumped.{suffix}"));
        assert!(path.exists(), "{} missing", path.display());
        assert!(
            compiled.dumped.contains(&path),
            "{} not reported",
            path.display()
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn unknown_pipeline_is_an_error() {
    let g = unary("pipe", "aten.exp.default", &[4], &[4]);
    let options = Options {
        pipeline: "warp-speed".into(),
        ..Options::new(Target::host().unwrap())
    };
    let err = compile(&g, None, &options)
        .err()
        .expect("must fail")
        .to_string();
    assert!(err.contains("no such named pipeline"), "{err}");
}

/// An activation op and its reference.
type Activation = (&'static str, fn(f64) -> f64);

/// The activation of layer `i` of [`matmul_chain`], and its reference. Distinct activations keep
/// the layers from being merged into one function by the outline stage.
const ACTIVATIONS: [Activation; 4] = [
    ("aten.tanh.default", f64::tanh),
    ("aten.sin.default", f64::sin),
    ("aten.cos.default", f64::cos),
    ("aten.atan.default", f64::atan),
];

/// `a{n-1}(... a0(x @ w0) ... @ w{n-1})`, the activations `ai` taken from [`ACTIVATIONS`] in
/// turn, with x `[256, 128]` and each w `[128, 128]`: `n` matrix products, each large enough
/// to be split across threads.
fn matmul_chain(name: &str, n: usize) -> fxmlir::Graph {
    let mut inputs = vec![input("x", meta(&[256, 128], DType::Float32))];
    let mut nodes = Vec::new();
    let mut last = "x".to_string();
    for i in 0..n {
        inputs.push(input(&format!("w{i}"), meta(&[128, 128], DType::Float32)));
        nodes.push(node(
            &format!("mm{i}"),
            "aten.mm.default",
            vec![r(&last), r(&format!("w{i}"))],
            vec![meta(&[256, 128], DType::Float32)],
        ));
        nodes.push(node(
            &format!("act{i}"),
            ACTIVATIONS[i % ACTIVATIONS.len()].0,
            vec![r(&format!("mm{i}"))],
            vec![meta(&[256, 128], DType::Float32)],
        ));
        last = format!("act{i}");
    }
    graph(name, inputs, nodes, &[last.as_str()])
}

#[test]
fn a_kernel_compiled_in_parts_matches_the_reference() {
    // Enough layers that the functions beside the largest pass the split threshold with the
    // narrower vectors (and fewer instructions) of an AVX2 host too.
    const N: usize = 8;
    let fill = |len: usize, seed: usize| -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7919 + seed * 104_729) % 97) as f32 / 97.0 - 0.5) * 0.2)
            .collect()
    };
    let x = fill(256 * 128, 0);
    let weights: Vec<Vec<f32>> = (0..N).map(|i| fill(128 * 128, i + 1)).collect();
    let mut expected: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    for (i, w) in weights.iter().enumerate() {
        let activation = ACTIVATIONS[i % ACTIVATIONS.len()].1;
        let mut next = vec![0.0f64; 256 * 128];
        for row in 0..256 {
            for col in 0..128 {
                let dot: f64 = (0..128)
                    .map(|k| expected[row * 128 + k] * f64::from(w[k * 128 + col]))
                    .sum();
                next[row * 128 + col] = activation(dot);
            }
        }
        expected = next;
    }

    let dir = std::env::temp_dir().join(format!("fxmlir-parts-{}", std::process::id()));
    let g = matmul_chain("parts", N);
    let mut results = Vec::new();
    for threads in [2, 1] {
        let options = Options {
            dump_dir: Some(dir.clone()),
            ..Options::new(Target::host().unwrap().with_threads(threads))
        };
        let compiled = compile(&g, None, &options).expect("compiles");
        let ir = std::fs::read_to_string(dir.join("parts.ll")).unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if threads == 2 && cores > 1 {
            assert!(ir.contains("\n; part 1\n"), "the kernel was not split");
        }
        let mut buffers: Vec<Vec<f32>> = std::iter::once(x.clone())
            .chain(weights.iter().cloned())
            .chain(std::iter::once(vec![0.0f32; 256 * 128]))
            .collect();
        let pointers: Vec<usize> = buffers
            .iter_mut()
            .map(|b| b.as_mut_ptr() as usize)
            .collect();
        // SAFETY: each buffer matches the graph's metadata.
        unsafe { compiled.call(&pointers, None).expect("runs") };
        results.push(buffers.pop().unwrap());
    }
    std::fs::remove_dir_all(&dir).ok();
    for (got, want) in results[0].iter().zip(&expected) {
        assert!((f64::from(*got) - want).abs() < 1e-4, "{got} != {want}");
    }
    for (split, whole) in results[0].iter().zip(&results[1]) {
        assert!((split - whole).abs() < 1e-5, "{split} != {whole}");
    }
}

/// A host that runs each call as a two-rank collective whose other rank holds `other`'s
/// values: `all_reduce` sums in place, `all_gather` writes both ranks' values; it records the
/// calls.
struct TwoRanks {
    other: f32,
    calls: std::sync::Mutex<Vec<(usize, bool)>>,
}

impl fxmlir::jit::host::HostCalls for TwoRanks {
    fn call(&self, number: usize, source: usize, target: usize) -> Result<(), String> {
        self.calls.lock().unwrap().push((number, source == target));
        // SAFETY: the kernel passes its live buffers: the source holds 3 floats, the target
        // 3 (in place) or 6 (the gather).
        unsafe {
            let input = std::slice::from_raw_parts(source as *const f32, 3).to_vec();
            match number {
                0 => {
                    let out = std::slice::from_raw_parts_mut(target as *mut f32, 3);
                    for (o, x) in out.iter_mut().zip(&input) {
                        *o = x + self.other;
                    }
                }
                _ => {
                    let out = std::slice::from_raw_parts_mut(target as *mut f32, 6);
                    out[..3].copy_from_slice(&input);
                    out[3..].fill(self.other);
                }
            }
        }
        Ok(())
    }
}

#[test]
fn collectives_call_the_host_in_graph_order() {
    let collective = |name: &str, target: &str, input: &str, args: Vec<Arg>, names: &[&str]| {
        let mut n = node(name, target, [vec![r(input)], args].concat(), vec![]);
        n.arg_names = names.iter().map(|s| s.to_string()).collect();
        n
    };
    let mut nodes = vec![
        node(
            "neg",
            "aten.neg.default",
            vec![r("x")],
            vec![meta(&[3], DType::Float32)],
        ),
        collective(
            "all_reduce",
            "_c10d_functional.all_reduce.default",
            "neg",
            vec![Arg::Str("sum".into()), Arg::Str("0".into())],
            &["input", "reduce_op", "group_name"],
        ),
        collective(
            "wait",
            "_c10d_functional.wait_tensor.default",
            "all_reduce",
            vec![],
            &["tensor"],
        ),
        collective(
            "all_gather",
            "_c10d_functional.all_gather_into_tensor.default",
            "wait",
            vec![Arg::Int(2), Arg::Str("0".into())],
            &["input", "group_size", "group_name"],
        ),
        node(
            "double",
            "aten.mul.Scalar",
            vec![r("all_gather"), Arg::Int(2)],
            vec![meta(&[6], DType::Float32)],
        ),
    ];
    for n in &mut nodes[1..3] {
        n.outputs = vec![meta(&[3], DType::Float32)];
    }
    nodes[3].outputs = vec![meta(&[6], DType::Float32)];
    let g = graph(
        "collectives",
        vec![input("x", meta(&[3], DType::Float32))],
        nodes,
        &["double"],
    );
    let compiled = compile(&g, None, &Options::new(Target::host().unwrap())).expect("compiles");
    assert_eq!(
        compiled
            .host_calls
            .iter()
            .map(|s| s.node.as_str())
            .collect::<Vec<_>>(),
        ["all_reduce", "all_gather"]
    );
    let mut x = [1.0f32, 2.0, 3.0];
    let mut out = [0.0f32; 6];
    let pointers = [x.as_mut_ptr() as usize, out.as_mut_ptr() as usize];
    // Without a host the kernel is refused before it runs.
    // SAFETY: the call is rejected before any pointer is used.
    let refused = unsafe { compiled.call(&pointers, None) }.unwrap_err();
    assert!(
        refused.to_string().contains("only the Python call path"),
        "{refused}"
    );
    let host = TwoRanks {
        other: 10.0,
        calls: Default::default(),
    };
    // SAFETY: the buffers match the graph's metadata.
    unsafe { compiled.call(&pointers, Some(&host)) }.expect("runs");
    // (-x + 10) gathered with 10s from the other rank, doubled.
    assert_eq!(out, [18.0, 16.0, 14.0, 20.0, 20.0, 20.0]);
    assert_eq!(*host.calls.lock().unwrap(), [(0, true), (1, false)]);
}

/// A host whose first call fails.
struct Failing;

impl fxmlir::jit::host::HostCalls for Failing {
    fn call(&self, _: usize, _: usize, _: usize) -> Result<(), String> {
        Err("connection reset".into())
    }
}

#[test]
fn a_failed_host_call_names_its_node() {
    let mut n = node(
        "all_reduce",
        "_c10d_functional.all_reduce.default",
        vec![r("x"), Arg::Str("sum".into()), Arg::Str("0".into())],
        vec![meta(&[3], DType::Float32)],
    );
    n.arg_names = ["input", "reduce_op", "group_name"]
        .map(String::from)
        .to_vec();
    n.source = Some(Source {
        file: "train.py".into(),
        line: 9,
        code: None,
    });
    let g = graph(
        "failing",
        vec![input("x", meta(&[3], DType::Float32))],
        vec![n],
        &["all_reduce"],
    );
    let compiled = compile(&g, None, &Options::new(Target::host().unwrap())).expect("compiles");
    let (mut x, mut out) = ([1.0f32; 3], [0.0f32; 3]);
    let pointers = [x.as_mut_ptr() as usize, out.as_mut_ptr() as usize];
    // SAFETY: the buffers match the graph's metadata.
    let err = unsafe { compiled.call(&pointers, Some(&Failing)) }.unwrap_err();
    assert!(matches!(err, Error::HostCall { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "node `all_reduce` (_c10d_functional.all_reduce.default) at train.py:9: connection reset"
    );
}
