// RUN: fxmlir-opt --target=skylake-avx512,threads=2 --pipeline schedule --split-input-file %s \
// RUN:   | FileCheck %s --enable-var-scope --implicit-check-not=transform. --implicit-check-not=fxmlir.

// The schedule stage on products with symbolic sizes (`?`, read at run time), on two threads.
// The register tile loop over the rows is peeled: full 8x32 tiles (static, so they vectorise
// without masks) up to the last multiple of 8, then the rest (fewer than 8
// rows) one row at a time, a 32-wide vector each. Thread chunks cut the fixed columns.

// CHECK-DAG:   #[[$MAIN:.*]] = affine_map<()[s0] -> ((s0 floordiv 8) * 8)>
// CHECK-LABEL: func.func @rows(
// CHECK-NOT:     linalg.
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           %[[END:.*]] = affine.apply #[[$MAIN]]()[%[[M:.*]]]
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[END]] step %{{.*}}
// CHECK:             vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK:           scf.for %{{.*}} = %[[END]] to %[[M]] step %{{.*}}
// CHECK:             scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<?x32xf32>)
// CHECK:               vector.contract {{.*}} : vector<4xf32>, vector<4x32xf32> into vector<32xf32>
func.func @rows(%a: tensor<?x256xf32>, %b: tensor<256x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x256xf32>
  %e = tensor.empty(%m) : tensor<?x64xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x256xf32>, tensor<256x64xf32>) outs(%f : tensor<?x64xf32>) -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// -----

// A right operand of 256 KiB, whole in each reduction: symbolic rows are not known to be few,
// so each thread packs its 128 columns into four 256 x 32 panels once, before the loop of full
// 8-row tiles, which reads them; the rest (fewer than 8 rows) reads the operand where it lies.

// CHECK-LABEL: func.func @packed_rows(
// CHECK-SAME:    %[[A:[^:]*]]: tensor<?x256xf32>{{[^,]*}}, %[[B:[^:]*]]: tensor<256x256xf32>
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           %[[PANELS:.*]] = scf.for {{.*}} -> (tensor<4x256x32xf32>)
// CHECK:           scf.for
// CHECK:             vector.transfer_read %[[PANELS]]{{.*}} : tensor<4x256x32xf32>, vector<4x32xf32>
// CHECK:             vector.contract {{.*}} into vector<8x32xf32>
// CHECK:           scf.for
// CHECK:             vector.transfer_read %[[B]]{{.*}} : tensor<256x256xf32>, vector<4x32xf32>
// CHECK:             vector.contract {{.*}} into vector<32xf32>
func.func @packed_rows(%a: tensor<?x256xf32>, %b: tensor<256x256xf32>) -> tensor<?x256xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x256xf32>
  %e = tensor.empty(%m) : tensor<?x256xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x256xf32>) -> tensor<?x256xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x256xf32>, tensor<256x256xf32>) outs(%f : tensor<?x256xf32>) -> tensor<?x256xf32>
  return %r : tensor<?x256xf32>
}

// -----

// Symbolic rows with an epilogue (bias, then tanh): the epilogue is tiled with the product
// and holds it in its tile loops. The peel leaves full 8x32 tiles (packed right operand, the
// tanh on the whole register tile) and a rest tiled a row at a time, the product and its fill
// pulled into each row: the product never reaches memory.

// CHECK-LABEL: func.func @epilogue_rows(
// CHECK-NOT:     linalg.
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           %[[PANELS:.*]] = scf.for {{.*}} -> (tensor<4x256x32xf32>)
// CHECK:           scf.for
// CHECK:             vector.contract {{.*}} into vector<8x32xf32>
// CHECK:             math.tanh %{{.*}} : vector<8x32xf32>
// CHECK:           scf.for
// CHECK:             scf.for %{{.*}} = %c0 to %{{.*}} step %c1
// CHECK:               vector.contract {{.*}} into vector<32xf32>
// CHECK:               math.tanh %{{.*}} : vector<32xf32>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @epilogue_rows(%a: tensor<?x256xf32>, %b: tensor<256x256xf32>, %bias: tensor<256xf32>) -> tensor<?x256xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x256xf32>
  %e = tensor.empty(%m) : tensor<?x256xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x256xf32>) -> tensor<?x256xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x256xf32>, tensor<256x256xf32>) outs(%f : tensor<?x256xf32>) -> tensor<?x256xf32>
  %e2 = tensor.empty(%m) : tensor<?x256xf32>
  %g = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%r, %bias : tensor<?x256xf32>, tensor<256xf32>) outs(%e2 : tensor<?x256xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    %t = math.tanh %s : f32
    linalg.yield %t : f32
  } -> tensor<?x256xf32>
  return %g : tensor<?x256xf32>
}

// -----

// A right operand of 4 MiB: 256-deep reduction blocks, each block of it packed into 16
// panels of 256 x 32 once, outside the peeled row loops (which both read the panels).
// CHECK-LABEL: func.func @blocked(
// CHECK-NOT:     linalg.matmul
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<?x512xf32>)
// CHECK:             %[[PANELS:.*]] = scf.for {{.*}} -> (tensor<16x256x32xf32>)
// CHECK:             scf.for
// CHECK:               vector.transfer_read %[[PANELS]]{{.*}} : tensor<16x256x32xf32>, vector<4x32xf32>
// CHECK:               vector.contract {{.*}} into vector<8x32xf32>
// CHECK:             scf.for
// CHECK:               vector.contract {{.*}} into vector<32xf32>
func.func @blocked(%a: tensor<?x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<?x1024xf32> {
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x1024xf32>
  %e = tensor.empty(%m) : tensor<?x1024xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x1024xf32>) -> tensor<?x1024xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x1024xf32>, tensor<1024x1024xf32>) outs(%f : tensor<?x1024xf32>) -> tensor<?x1024xf32>
  return %r : tensor<?x1024xf32>
}

// -----

// A symbolic batch goes in one chunk per thread, sized at run time (the last may be shorter);
// each batch entry's rows are peeled as above.
// CHECK-LABEL: func.func @batch(
// CHECK-NOT:     linalg.batch_matmul
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           affine.min
// CHECK:           scf.for
// CHECK:             vector.contract {{.*}} into vector<8x32xf32>
// CHECK:             vector.contract {{.*}} into vector<32xf32>
func.func @batch(%a: tensor<?x?x64xf32>, %b: tensor<?x64x128xf32>) -> tensor<?x?x128xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %a, %c0 : tensor<?x?x64xf32>
  %m = tensor.dim %a, %c1 : tensor<?x?x64xf32>
  %e = tensor.empty(%n, %m) : tensor<?x?x128xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x?x128xf32>) -> tensor<?x?x128xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<?x?x64xf32>, tensor<?x64x128xf32>) outs(%f : tensor<?x?x128xf32>) -> tensor<?x?x128xf32>
  return %r : tensor<?x?x128xf32>
}

// -----

// A product whose reduction is symbolic (`p @ v` over a growing cache): one chunk of the batch
// per thread, register tiles of 32 columns whose reduction steps one at a time. Its operands
// are slices in the schedule's loops, so the fusion stage cannot pull the softmax producing
// `p` into them (which recomputed each `exp` once per column).
// CHECK-LABEL: func.func @symbolic_reduction(
// CHECK-NOT:     linalg.batch_matmul
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[K:.*]] step %c1 iter_args(%{{.*}}) -> (vector<32xf32>)
// CHECK:             vector.transfer_read {{.*}} : tensor<4x?x64xf32>, vector<32xf32>
// CHECK:             vector.contract {{.*}} : vector<1xf32>, vector<1x32xf32> into vector<32xf32>
func.func @symbolic_reduction(%p: tensor<4x1x?xf32>, %v: tensor<4x?x64xf32>) -> tensor<4x1x64xf32> {
  %e = tensor.empty() : tensor<4x1x64xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x1x64xf32>) -> tensor<4x1x64xf32>
  %r = linalg.batch_matmul ins(%p, %v : tensor<4x1x?xf32>, tensor<4x?x64xf32>) outs(%f : tensor<4x1x64xf32>) -> tensor<4x1x64xf32>
  return %r : tensor<4x1x64xf32>
}

// -----

// Symbolic columns and one row (`q @ kᵀ` of a decode step): the columns in a chunk per
// thread, their size computed at run time; the column tile loop peeled into full 32-wide
// tiles and the rest (fewer than 32 columns) one column at a time.
// CHECK-DAG:   #[[$MAIN:.*]] = affine_map<()[s0] -> ((s0 floordiv 32) * 32)>
// CHECK-LABEL: func.func @symbolic_columns(
// CHECK-NOT:     linalg.matmul
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           %[[END:.*]] = affine.apply #[[$MAIN]]
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[END]] step %c32
// CHECK:             vector.contract {{.*}} : vector<4xf32>, vector<4x32xf32> into vector<32xf32>
// CHECK:           scf.for %{{.*}} = %[[END]] to %{{.*}} step %c32
// CHECK:             scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1
// CHECK:               vector.contract {{.*}} : vector<4xf32>, vector<4x1xf32> into vector<1xf32>
func.func @symbolic_columns(%q: tensor<1x64xf32>, %k: tensor<64x?xf32>, %out: tensor<1x?xf32>) -> tensor<1x?xf32> {
  %r = linalg.matmul ins(%q, %k : tensor<1x64xf32>, tensor<64x?xf32>) outs(%out : tensor<1x?xf32>) -> tensor<1x?xf32>
  return %r : tensor<1x?xf32>
}

// -----

// Symbolic columns under 64 fixed rows (a convolution's patches over images whose sizes
// Dynamo made symbolic): a chunk of columns per thread; the column tile loop outside the
// rows', peeled. Each full 32-wide column tile's right operand is packed once into a 576 x 32
// panel, which the 8-row tiles inside read; the rest (fewer than 32 columns) reads the
// operand where it lies, a column at a time.
// CHECK-DAG:   #[[$MAIN:.*]] = affine_map<()[s0] -> ((s0 floordiv 32) * 32)>
// CHECK-LABEL: func.func @column_panels(
// CHECK-SAME:    %[[W:[^:]*]]: tensor<64x576xf32>{{[^,]*}}, %[[P:[^:]*]]: tensor<576x?xf32>
// CHECK-NOT:     linalg.matmul
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           %[[END:.*]] = affine.apply #[[$MAIN]]
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[END]] step %c32
// CHECK:             %[[PANEL:.*]] = scf.for {{.*}} -> (tensor<576x32xf32>)
// CHECK:               vector.transfer_read %[[P]]{{.*}} : tensor<576x?xf32>, vector<8x32xf32>
// CHECK:             scf.for %{{.*}} = %{{.*}} to %c64 step %c8
// CHECK:               vector.transfer_read %[[PANEL]]{{.*}} : tensor<576x32xf32>, vector<4x32xf32>
// CHECK:               vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK:           scf.for %{{.*}} = %[[END]] to %{{.*}} step %c32
// CHECK:             scf.for %{{.*}} = %{{.*}} to %c64 step %c8
// CHECK:               scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1
// CHECK:                 vector.transfer_read %[[P]]{{.*}} : tensor<576x?xf32>, vector<4x1xf32>
func.func @column_panels(%w: tensor<64x576xf32>, %p: tensor<576x?xf32>) -> tensor<64x?xf32> {
  %c1 = arith.constant 1 : index
  %n = tensor.dim %p, %c1 : tensor<576x?xf32>
  %e = tensor.empty(%n) : tensor<64x?xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x?xf32>) -> tensor<64x?xf32>
  %r = linalg.matmul ins(%w, %p : tensor<64x576xf32>, tensor<576x?xf32>) outs(%f : tensor<64x?xf32>) -> tensor<64x?xf32>
  return %r : tensor<64x?xf32>
}

// -----

// The same over 256 rows: each thread keeps 128 rows (src/pipeline/schedule/model.rs,
// PANEL_CHUNK_ROWS), so the product is cut by rows, and each thread's columns (all of them)
// end in one short tile rather than one per thread.
// CHECK-LABEL: func.func @row_chunk_panels(
// CHECK-NOT:     linalg.matmul
// CHECK:         scf.forall (%{{.*}}) in (2)
// CHECK:           scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c32 iter_args(%{{.*}} = %{{.*}}) -> (tensor<128x?xf32>)
// CHECK:             %[[PANEL:.*]] = scf.for {{.*}} -> (tensor<576x32xf32>)
// CHECK:             scf.for %{{.*}} = %{{.*}} to %c128 step %c8
// CHECK:               vector.transfer_read %[[PANEL]]{{.*}} : tensor<576x32xf32>, vector<4x32xf32>
func.func @row_chunk_panels(%w: tensor<256x576xf32>, %p: tensor<576x?xf32>) -> tensor<256x?xf32> {
  %c1 = arith.constant 1 : index
  %n = tensor.dim %p, %c1 : tensor<576x?xf32>
  %e = tensor.empty(%n) : tensor<256x?xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<256x?xf32>) -> tensor<256x?xf32>
  %r = linalg.matmul ins(%w, %p : tensor<256x576xf32>, tensor<576x?xf32>) outs(%f : tensor<256x?xf32>) -> tensor<256x?xf32>
  return %r : tensor<256x?xf32>
}
