//! The interchange model: round trips and every validation error.

mod common;

use common::*;
use fxmlir::graph::{Arg, DType, Graph, Source};

fn add_graph() -> Graph {
    broadcast_add("g", 1)
}

fn expect_invalid(g: &Graph, needle: &str) {
    let err = g
        .validate()
        .expect_err("graph should be invalid")
        .to_string();
    assert!(
        err.contains(needle),
        "error `{err}` should mention `{needle}`"
    );
}

#[test]
fn json_round_trip_preserves_the_graph() {
    let mut g = add_graph();
    g.nodes[0].source = Some(Source {
        file: "m.py".into(),
        line: 7,
        code: Some("x + y".into()),
    });
    g.nodes[0]
        .args
        .push(Arg::Float(fxmlir::graph::FloatLit::Special(
            fxmlir::graph::SpecialFloat::NegInf,
        )));
    let text = g.to_json().unwrap();
    let back = Graph::from_json(&text).unwrap();
    assert_eq!(back, g);
    assert!(text.contains("\"-inf\""));
}

#[test]
fn rejects_undefined_references() {
    let mut g = add_graph();
    g.nodes[0].args[1] = r("nope");
    expect_invalid(&g, "`nope`, which is not defined");
}

#[test]
fn rejects_out_of_range_output_index() {
    let mut g = add_graph();
    g.outputs[0].index = 3;
    expect_invalid(&g, "output 3 of `add`");
}

#[test]
fn rejects_duplicate_names() {
    let mut g = add_graph();
    g.nodes[0].name = "x".into();
    expect_invalid(&g, "defined twice");
}

#[test]
fn rejects_shape_stride_mismatch() {
    let mut g = add_graph();
    g.inputs[0].meta.strides = vec![1];
    expect_invalid(&g, "differ in length");
}

#[test]
fn rejects_negative_sizes_and_other_devices() {
    let mut g = add_graph();
    g.inputs[0].meta.shape[0] = -1;
    expect_invalid(&g, "negative size");
    let mut g = add_graph();
    g.inputs[1].meta.device = "cuda:0".into();
    expect_invalid(&g, "device `cuda:0`");
}

#[test]
fn rejects_other_versions_and_formats() {
    let mut g = add_graph();
    g.version = 99;
    expect_invalid(&g, "version 99");
    let mut g = add_graph();
    g.format = "onnx".into();
    expect_invalid(&g, "format is `onnx`");
}

#[test]
fn rejects_bad_graph_names() {
    let mut g = add_graph();
    g.name = "a/b".into();
    expect_invalid(&g, "graph name");
}

#[test]
fn malformed_json_is_an_error_not_a_panic() {
    for text in [
        "",
        "{",
        "[]",
        "{\"format\": 1}",
        "null",
        "{\"format\":\"fxmlir.graph\",\"version\":1}",
    ] {
        let err = Graph::from_json(text).expect_err(text);
        assert!(err.to_string().starts_with("malformed graph"), "{err}");
    }
}

#[test]
fn contiguity_ignores_unit_dimensions() {
    assert!(strided(&[1, 4], &[99, 1], DType::Float32).is_contiguous());
    assert!(!strided(&[2, 4], &[1, 2], DType::Float32).is_contiguous());
}
