use std::time::Duration;

use super::device::DEVICES;
use super::testing::*;
use super::*;
use crate::error::ErrorKind;
use crate::graph::args::Val;
use crate::graph::GraphBuilder;

/// A destroyed context's device goes to the next context instead of
/// being torn down (which crashes NVIDIA's driver, see `DEVICES`).
/// "low-power": no other test opens devices for it, so the pool's
/// low-power entries are this test's own.
#[test]
fn a_dropped_backend_leaves_its_device_to_the_next() {
    let first = match GpuBackend::new("low-power") {
        Ok(b) => b,
        Err(e) => {
            eprintln!("skipping the GPU test: {}", e.message);
            return;
        }
    };
    let device = first.gpu.device.clone();
    drop(first);
    let second = GpuBackend::new("low-power").expect("the pooled device");
    assert!(second.gpu.device == device);
    assert!(DEVICES
        .lock()
        .unwrap()
        .iter()
        .all(|d| d.power_preference != wgpu::PowerPreference::LowPower));
}

/// WebGPU's names of an adapter against Vulkan's numbers.
#[test]
fn adapter_hints_match_by_vendor_and_device() {
    let info = |name: &str, vendor, device| wgpu::AdapterInfo {
        name: name.into(),
        vendor,
        device,
        ..wgpu::AdapterInfo::new(wgpu::DeviceType::Cpu, wgpu::Backend::Vulkan)
    };
    let hint = |vendor: &str, device: &str| AdapterHint {
        vendor: vendor.into(),
        device: device.into(),
    };
    let lavapipe = info("llvmpipe (LLVM 15.0.6, 256 bits)", 0x10005, 0);
    let h100 = info("NVIDIA H100 80GB HBM3", 0x10de, 0x2330);
    assert!(hint("mesa", "llvmpipe-llvm-15-0-6-256-bits-").matches(&lavapipe));
    assert!(!hint("mesa", "llvmpipe-llvm-16-0-6-256-bits-").matches(&lavapipe));
    assert!(!hint("nvidia", "llvmpipe-llvm-15-0-6-256-bits-").matches(&lavapipe));
    assert!(hint("nvidia", "0x2330").matches(&h100));
    assert!(hint("0x10de", "").matches(&h100));
    assert!(hint("NVIDIA", "nvidia-h100-80gb-hbm3").matches(&h100));
    assert!(!hint("nvidia", "0x2331").matches(&h100));
    assert!(!hint("", "").matches(&h100));
    assert!(!hint("unknown", "---").matches(&h100));
}

#[test]
fn device_identity() {
    let Some(be) = backend() else { return };
    assert_eq!(be.device_type(), "gpu");
    eprintln!("GPU backend, accelerated: {}", be.accelerated());
}

#[test]
fn binary_broadcasting() {
    let Some(mut be) = backend() else { return };
    let cases: &[(&[usize], &[usize])] = &[
        (&[7, 9], &[7, 9]),
        (&[2, 3, 4], &[3, 1]),
        (&[4, 1, 5], &[1, 3, 1]),
        (&[], &[2, 2]),
        (&[1, 5], &[1, 1]),
        (&[1], &[1]),
        (&[3, 1, 1, 300], &[2, 300]),
    ];
    let kinds: &[(&str, BinaryFn)] = &[
        ("add", |x, y| x + y),
        ("sub", |x, y| x - y),
        ("mul", |x, y| x * y),
        ("div", |x, y| x / y),
        ("max", f32::max),
        ("min", f32::min),
    ];
    for (n, (sa, sb)) in cases.iter().enumerate() {
        let out_shape = crate::graph::ops::broadcast_shapes(sa, sb).unwrap();
        let count: usize = out_shape.iter().product();
        let a = random(sa.iter().product(), n as u64 * 2 + 1);
        let b = random(sb.iter().product(), n as u64 * 2 + 2);
        for (name, f) in kinds {
            let g = op_graph(name, DataType::Float32, &[sa, sb], &[]).unwrap();
            let out = run(&mut be, g, vec![Buf::F32(a.clone()), Buf::F32(b.clone())]).unwrap();
            let want: Vec<f32> = (0..count)
                .map(|i| {
                    f(
                        a[broadcast_index(&out_shape, sa, i)],
                        b[broadcast_index(&out_shape, sb, i)],
                    )
                })
                .collect();
            assert_close(
                &f32s(&out[0]),
                &want,
                1e-6,
                &format!("{name} {sa:?} {sb:?}"),
            );
        }
    }
}

#[test]
fn pow_float_and_int() {
    let Some(mut be) = backend() else { return };
    let x = vec![2.0f32, -2.0, -2.0, 0.0, 0.0, 4.0, -8.0, 1.5];
    let y = vec![3.0f32, 2.0, 3.0, 2.0, 0.0, 0.5, 0.5, -1.0];
    let g = op_graph("pow", DataType::Float32, &[&[8], &[8]], &[]).unwrap();
    let out = run(&mut be, g, vec![Buf::F32(x.clone()), Buf::F32(y.clone())]).unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a.powf(*b)).collect();
    assert_close(&f32s(&out[0]), &want, 1e-5, "pow float32");

    let x = vec![2i32, -3, 5, 1, -1, 7];
    let y = vec![10i32, 3, 0, -4, -3, 2];
    let g = op_graph("pow", DataType::Int32, &[&[6], &[6]], &[]).unwrap();
    let out = run(&mut be, g, vec![Buf::I32(x), Buf::I32(y)]).unwrap();
    assert_eq!(out[0], Buf::I32(vec![1024, -27, 1, 1, -1, 49]));
}

#[test]
fn integer_binary() {
    let Some(mut be) = backend() else { return };
    let g = op_graph("add", DataType::Int32, &[&[2, 3], &[3]], &[]).unwrap();
    let out = run(
        &mut be,
        g,
        vec![
            Buf::I32(vec![1, 2, 3, 4, 5, 6]),
            Buf::I32(vec![10, -20, 30]),
        ],
    )
    .unwrap();
    assert_eq!(out[0], Buf::I32(vec![11, -18, 33, 14, -15, 36]));
    let g = op_graph("mul", DataType::Uint32, &[&[3], &[1]], &[]).unwrap();
    let out = run(
        &mut be,
        g,
        vec![Buf::U32(vec![1, 2, 4_000_000_000]), Buf::U32(vec![1])],
    )
    .unwrap();
    assert_eq!(out[0], Buf::U32(vec![1, 2, 4_000_000_000]));
}

#[test]
fn unary_ops() {
    let Some(mut be) = backend() else { return };
    let mut x = random(1000, 7);
    x.extend([0.0, -0.0, 30.0, -30.0, 100.0, -100.0]);
    let kinds: &[(&str, UnaryFn)] = &[
        ("abs", f32::abs),
        ("neg", |v| -v),
        ("exp", f32::exp),
        ("relu", |v| v.max(0.0)),
        ("sigmoid", |v| 1.0 / (1.0 + (-v).exp())),
        ("tanh", f32::tanh),
    ];
    for (name, f) in kinds {
        let g = op_graph(name, DataType::Float32, &[&[x.len()]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::F32(x.clone())]).unwrap();
        let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
        assert_close(&f32s(&out[0]), &want, 1e-5, name);
    }
    let pos: Vec<f32> = x.iter().map(|v| v.abs() + 0.01).collect();
    for (name, f) in [("log", f32::ln as UnaryFn), ("sqrt", f32::sqrt)] {
        let g = op_graph(name, DataType::Float32, &[&[pos.len()]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::F32(pos.clone())]).unwrap();
        let want: Vec<f32> = pos.iter().map(|&v| f(v)).collect();
        assert_close(&f32s(&out[0]), &want, 1e-5, name);
    }
    let g = op_graph("relu", DataType::Int32, &[&[4]], &[]).unwrap();
    let out = run(&mut be, g, vec![Buf::I32(vec![-5, 0, 3, i32::MIN])]).unwrap();
    assert_eq!(out[0], Buf::I32(vec![0, 0, 3, 0]));
}

/// More elements than one grid dimension holds: the rest go to y.
#[test]
fn large_elementwise_grid() {
    let Some(mut be) = backend() else { return };
    let n = be.gpu.limits.max_compute_workgroups_per_dimension as usize * 256 + 1000;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let g = op_graph("neg", DataType::Float32, &[&[n]], &[]).unwrap();
    let out = run(&mut be, g, vec![Buf::F32(x)]).unwrap();
    let got = f32s(&out[0]);
    assert_eq!(got.len(), n);
    if let Some(i) = (0..n).find(|&i| got[i] != -(i as f32)) {
        panic!("element {i} is {}, expected {}", got[i], -(i as f32));
    }
}

#[test]
fn clamp_float_and_int() {
    let Some(mut be) = backend() else { return };
    let x = random(777, 3);
    let opts = Val::Dict(vec![
        ("minValue".into(), Val::Number(-0.5)),
        ("maxValue".into(), Val::Number(1.25)),
    ]);
    let g = op_graph("clamp", DataType::Float32, &[&[777]], &[opts]).unwrap();
    let out = run(&mut be, g, vec![Buf::F32(x.clone())]).unwrap();
    let want: Vec<f32> = x.iter().map(|v| v.clamp(-0.5, 1.25)).collect();
    assert_close(&f32s(&out[0]), &want, 0.0, "clamp");

    // Only a lower bound: the upper one is +infinity.
    let opts = Val::Dict(vec![("minValue".into(), Val::Number(0.0))]);
    let g = op_graph("clamp", DataType::Float32, &[&[777]], &[opts]).unwrap();
    let out = run(&mut be, g, vec![Buf::F32(x.clone())]).unwrap();
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
    assert_close(&f32s(&out[0]), &want, 0.0, "clamp min only");

    let opts = Val::Dict(vec![
        ("minValue".into(), Val::Number(-3.0)),
        ("maxValue".into(), Val::Number(2.0)),
    ]);
    let g = op_graph("clamp", DataType::Int32, &[&[5]], &[opts]).unwrap();
    let out = run(&mut be, g, vec![Buf::I32(vec![-10, -3, 0, 2, 99])]).unwrap();
    assert_eq!(out[0], Buf::I32(vec![-3, -3, 0, 2, 2]));
}

/// A plain reference product with numpy batch broadcasting.
fn matmul_ref(a: &[f32], sa: &[usize], b: &[f32], sb: &[usize], so: &[usize]) -> Vec<f32> {
    let (ra, rb, ro) = (sa.len(), sb.len(), so.len());
    let (m, k, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 1]);
    let batch = &so[..ro - 2];
    let batches: usize = batch.iter().product();
    let mut out = vec![0f32; batches * m * n];
    for z in 0..batches {
        let za = broadcast_index(batch, &sa[..ra - 2], z);
        let zb = broadcast_index(batch, &sb[..rb - 2], z);
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f64;
                for t in 0..k {
                    s += a[za * m * k + i * k + t] as f64 * b[zb * k * n + t * n + j] as f64;
                }
                out[z * m * n + i * n + j] = s as f32;
            }
        }
    }
    out
}

#[test]
fn matmul_shapes() {
    let Some(mut be) = backend() else { return };
    let cases: &[(&[usize], &[usize])] = &[
        (&[3, 5], &[5, 7]),
        (&[2, 33, 17], &[17, 65]),
        (&[1, 1], &[1, 1]),
        (&[2, 1, 4, 3], &[3, 3, 2]),
        (&[130, 70], &[70, 129]),
        (&[1, 64, 16], &[2, 16, 64]),
        (&[5, 1], &[1, 6]),
    ];
    for (n, (sa, sb)) in cases.iter().enumerate() {
        let a = random(sa.iter().product(), 100 + n as u64);
        let b = random(sb.iter().product(), 200 + n as u64);
        let g = op_graph("matmul", DataType::Float32, &[sa, sb], &[]).unwrap();
        let so = g.operands[g.outputs[0].1].shape.clone();
        let out = run(&mut be, g, vec![Buf::F32(a.clone()), Buf::F32(b.clone())]).unwrap();
        let want = matmul_ref(&a, sa, &b, sb, &so);
        assert_close(
            &f32s(&out[0]),
            &want,
            1e-4,
            &format!("matmul {sa:?} x {sb:?}"),
        );
    }
}

/// relu(matmul(reshape(x + c1), w)): constants, intermediates and a
/// reshape alias in one graph.
#[test]
fn chained_graph_with_constants() {
    let Some(mut be) = backend() else { return };
    let mut b = GraphBuilder::new();
    let x = b.input("x", desc(DataType::Float32, &[2, 6])).unwrap();
    let c1v = random(6, 11);
    let wv = random(12, 12);
    let bytes = |v: &[f32]| Arc::new(v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>());
    let c1 = b
        .constant(desc(DataType::Float32, &[6]), bytes(&c1v))
        .unwrap();
    let w = b
        .constant(desc(DataType::Float32, &[3, 4]), bytes(&wv))
        .unwrap();
    let s = b.call("add", &[operand(&b, x), operand(&b, c1)]).unwrap()[0];
    let shape = Val::List(vec![Val::Number(4.0), Val::Number(3.0)]);
    let r = b.call("reshape", &[operand(&b, s), shape]).unwrap()[0];
    let m = b.call("matmul", &[operand(&b, r), operand(&b, w)]).unwrap()[0];
    let out = b.call("relu", &[operand(&b, m)]).unwrap()[0];
    let g = b
        .build(vec![("out".into(), out), ("sum".into(), r)])
        .unwrap();
    let xv = random(12, 13);
    let sum: Vec<f32> = (0..12).map(|i| xv[i] + c1v[i % 6]).collect();
    let want: Vec<f32> = matmul_ref(&sum, &[4, 3], &wv, &[3, 4], &[4, 4])
        .into_iter()
        .map(|v| v.max(0.0))
        .collect();
    let g = Arc::new(g);
    be.compile(5, g.clone()).unwrap();
    // Twice: a compiled graph is reusable.
    for _ in 0..2 {
        let out = be.compute(5, &g, vec![Buf::F32(xv.clone())]).unwrap();
        assert_close(&f32s(&out[0]), &want, 1e-5, "chained output");
        assert_close(&f32s(&out[1]), &sum, 0.0, "reshaped sum");
    }
}

#[test]
fn tensors_round_trip() {
    let Some(mut be) = backend() else { return };
    be.create_tensor(1, &desc(DataType::Float32, &[3])).unwrap();
    assert_eq!(be.read_tensor(1).unwrap(), Buf::F32(vec![0.0; 3]));
    be.write_tensor(1, Buf::F32(vec![1.0, -2.0, 3.5])).unwrap();
    assert_eq!(be.read_tensor(1).unwrap(), Buf::F32(vec![1.0, -2.0, 3.5]));
    // Zero elements, and a type whose byte length is not whole words.
    be.create_tensor(2, &desc(DataType::Float32, &[0, 4]))
        .unwrap();
    assert_eq!(be.read_tensor(2).unwrap(), Buf::F32(vec![]));
    be.create_tensor(3, &desc(DataType::Int8, &[3])).unwrap();
    be.write_tensor(3, Buf::I8(vec![-1, 2, -3])).unwrap();
    assert_eq!(be.read_tensor(3).unwrap(), Buf::I8(vec![-1, 2, -3]));
    assert_eq!(
        be.write_tensor(1, Buf::F32(vec![1.0])).unwrap_err().kind,
        ErrorKind::Type
    );
    be.destroy_tensor(1);
    assert_eq!(be.read_tensor(1).unwrap_err().kind, ErrorKind::InvalidState);
}

/// An asynchronous read returns at once, sees the contents as of its
/// place in the queue (not later writes), and completes on the reader
/// thread; a read of a destroyed tensor completes with the error.
#[test]
fn asynchronous_reads() {
    let Some(mut be) = backend() else { return };
    be.create_tensor(1, &desc(DataType::Float16, &[5])).unwrap();
    let first = Buf::f16_from_f32(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    be.write_tensor(1, first.clone()).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    for k in 0..3 {
        let tx = tx.clone();
        be.read_tensor_async(1, Box::new(move |r| tx.send((k, r)).unwrap()));
    }
    be.write_tensor(1, Buf::f16_from_f32(&[0.5; 5])).unwrap();
    let tx2 = tx.clone();
    be.read_tensor_async(1, Box::new(move |r| tx2.send((3, r)).unwrap()));
    be.read_tensor_async(99, Box::new(move |r| tx.send((4, r)).unwrap()));
    let mut got: Vec<(i32, Result<Buf>)> = (0..5)
        .map(|_| rx.recv_timeout(Duration::from_secs(60)).unwrap())
        .collect();
    got.sort_by_key(|(k, _)| *k);
    for (k, r) in &got[..3] {
        assert_eq!(r.as_ref().unwrap(), &first, "read {k}");
    }
    assert_eq!(got[3].1.as_ref().unwrap(), &Buf::f16_from_f32(&[0.5; 5]));
    assert_eq!(got[4].1.as_ref().unwrap_err().kind, ErrorKind::InvalidState);
}

/// Asynchronous reads between writes, each of which polls the device on
/// this thread while the reader thread waits: every read completes with
/// the data written before it. (A poll on one thread can be running a
/// read's map callback when the reader's own wait returns; the read waits
/// for the callback, `read::MapSlot`, rather than failing.)
#[test]
fn reads_between_writes_see_their_writes() {
    let Some(mut be) = backend() else { return };
    be.create_tensor(1, &desc(DataType::Float32, &[64]))
        .unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let n = 500;
    for k in 0..n {
        be.write_tensor(1, Buf::F32(vec![k as f32; 64])).unwrap();
        let tx = tx.clone();
        be.read_tensor_async(1, Box::new(move |r| tx.send((k, r)).unwrap()));
    }
    for _ in 0..n {
        let (k, r) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        assert_eq!(r.unwrap(), Buf::F32(vec![k as f32; 64]), "read {k}");
    }
}

/// Dispatch on tensors, then read: the queue keeps the order.
#[test]
fn dispatch_on_tensors() {
    let Some(mut be) = backend() else { return };
    let g = Arc::new(op_graph("sub", DataType::Float32, &[&[2, 2], &[2]], &[]).unwrap());
    be.compile(9, g.clone()).unwrap();
    be.create_tensor(10, &desc(DataType::Float32, &[2, 2]))
        .unwrap();
    be.create_tensor(11, &desc(DataType::Float32, &[2]))
        .unwrap();
    be.create_tensor(12, &desc(DataType::Float32, &[2, 2]))
        .unwrap();
    be.write_tensor(10, Buf::F32(vec![1.0, 2.0, 3.0, 4.0]))
        .unwrap();
    be.write_tensor(11, Buf::F32(vec![0.5, 1.0])).unwrap();
    be.dispatch(9, &[10, 11], &[12]).unwrap();
    assert_eq!(
        be.read_tensor(12).unwrap(),
        Buf::F32(vec![0.5, 1.0, 2.5, 3.0])
    );
    // The output fed back as an input, written in the same dispatch.
    be.dispatch(9, &[12, 11], &[12]).unwrap();
    assert_eq!(
        be.read_tensor(12).unwrap(),
        Buf::F32(vec![0.0, 0.0, 2.0, 2.0])
    );
    assert_eq!(
        be.dispatch(9, &[10, 99], &[12]).unwrap_err().kind,
        ErrorKind::InvalidState
    );
}

/// The profiled dispatch (`WEBNN_GPU_PROFILE`) runs the graph twice, the
/// second time node by node: its outputs are one dispatch's, also where
/// the output tensor is an input.
#[test]
fn a_profiled_dispatch_gives_one_dispatchs_outputs() {
    let Some(mut be) = backend() else { return };
    let g = Arc::new(op_graph("sub", DataType::Float32, &[&[2, 2], &[2]], &[]).unwrap());
    be.compile(9, g).unwrap();
    for (id, shape) in [(10, &[2, 2][..]), (11, &[2]), (12, &[2, 2])] {
        be.create_tensor(id, &desc(DataType::Float32, shape))
            .unwrap();
    }
    be.write_tensor(10, Buf::F32(vec![1.0, 2.0, 3.0, 4.0]))
        .unwrap();
    be.write_tensor(11, Buf::F32(vec![0.5, 1.0])).unwrap();
    let run = |be: &GpuBackend, ins: &[TensorId], outs: &[TensorId]| {
        let bufs = |ids: &[TensorId]| {
            ids.iter()
                .map(|i| &be.tensors[i].buffer)
                .collect::<Vec<_>>()
        };
        profiled(&be.gpu, &be.graphs[&9], &bufs(ins), &bufs(outs));
    };
    run(&be, &[10, 11], &[12]);
    assert_eq!(
        be.read_tensor(12).unwrap(),
        Buf::F32(vec![0.5, 1.0, 2.5, 3.0])
    );
    run(&be, &[12, 11], &[12]);
    assert_eq!(
        be.read_tensor(12).unwrap(),
        Buf::F32(vec![0.0, 0.0, 2.0, 2.0])
    );
}

/// Random data of `dt`: floats in [-2, 2), integers in [-50, 50) (or
/// [0, 100) unsigned), uint8 booleans 0/1.
/// float16, the 8- and 4-bit integers and int64 go through the
/// unpack, fix-up and pack steps around ordinary kernels.
#[test]
fn narrow_types_match_the_cpu() {
    use DataType::*;
    let Some(mut be) = backend() else { return };
    for dt in [Float16, Int8, Uint8] {
        for op in ["add", "sub", "mul", "max"] {
            check_vs_cpu(&mut be, op, &[dt, dt], &[&[3, 5], &[5]], &[], 0.0);
        }
    }
    for dt in [Float16, Int8] {
        check_vs_cpu(&mut be, "relu", &[dt], &[&[7, 3]], &[], 0.0);
    }
    check_vs_cpu(&mut be, "reduceSum", &[Float16], &[&[4, 9]], &[], 1e-3);
    for dt in [
        Float16, Int8, Uint8, Int4, Uint4, Int64, Uint64, Float32, Int32, Uint32,
    ] {
        check_vs_cpu(&mut be, "transpose", &[dt], &[&[3, 1, 5]], &[], 0.0);
        check_vs_cpu(
            &mut be,
            "slice",
            &[dt],
            &[&[4, 6]],
            &[list(&[1.0, 2.0]), list(&[2.0, 3.0])],
            0.0,
        );
        for to in [
            "float32", "float16", "int32", "uint32", "int64", "uint64", "int8", "uint8", "int4",
            "uint4",
        ] {
            check_vs_cpu(&mut be, "cast", &[dt], &[&[33]], &[s(to)], 0.0);
        }
    }
    check_vs_cpu(
        &mut be,
        "matmul",
        &[Float16, Float16],
        &[&[5, 7], &[7, 3]],
        &[],
        1e-3,
    );
    check_vs_cpu(&mut be, "exp", &[Float16], &[&[61]], &[], 1e-3);
    check_vs_cpu(&mut be, "div", &[Int8, Int8], &[&[4, 4], &[4]], &[], 0.0);
}

/// A long chain keeps a few intermediate buffers alive, not one per
/// node, and still computes what the CPU computes.
#[test]
fn intermediates_share_buffers() {
    let Some(mut be) = backend() else { return };
    let mut b = GraphBuilder::new();
    let x = b.input("x", desc(F, &[3, 67])).unwrap();
    let mut y = x;
    for k in 0..24 {
        let op = if k % 3 == 0 { "relu" } else { "exp" };
        let t = b.call(op, &[operand(&b, y)]).unwrap()[0];
        let t = b
            .call("reshape", &[operand(&b, t), list(&[67.0, 3.0])])
            .unwrap()[0];
        let t = b
            .call("reshape", &[operand(&b, t), list(&[3.0, 67.0])])
            .unwrap()[0];
        y = b.call("mul", &[operand(&b, t), operand(&b, x)]).unwrap()[0];
    }
    let g = b.build(vec![("y".into(), y)]).unwrap();
    let compiled = be.build(&g).unwrap();
    // One input slot plus a handful of intermediates (48 nodes compute).
    assert!(
        compiled.buffers.len() <= 5,
        "{} buffers",
        compiled.buffers.len()
    );
    let input = random_buf(F, 3 * 67, 7);
    let mut cpu = crate::backend::cpu::CpuBackend::new();
    let g = Arc::new(g);
    cpu.compile(1, g.clone()).unwrap();
    let want = cpu.compute(1, &g, vec![input.clone()]).unwrap();
    be.compile(1, g.clone()).unwrap();
    let got = be.compute(1, &g, vec![input]).unwrap();
    assert_close(&f32s(&got[0]), &f32s(&want[0]), 1e-4, "chain");
}

#[test]
fn softmax_axes() {
    let Some(mut be) = backend() else { return };
    for (shape, axis) in [
        (&[3usize, 7][..], 1.0),
        (&[3, 7], 0.0),
        (&[2, 5, 1, 9], 1.0),
        (&[2, 5, 1, 9], 2.0),
        (&[300, 3], 1.0),
        (&[1], 0.0),
    ] {
        check_vs_cpu(&mut be, "softmax", &[F], &[shape], &[n(axis)], 1e-5);
    }
}

#[test]
fn movement_ops() {
    let Some(mut be) = backend() else { return };
    for dt in [F, I, U] {
        check_vs_cpu(&mut be, "transpose", &[dt], &[&[3, 5, 7]], &[], 0.0);
        let perm = dict(&[("permutation", list(&[1.0, 3.0, 0.0, 2.0]))]);
        check_vs_cpu(&mut be, "transpose", &[dt], &[&[2, 1, 17, 3]], &[perm], 0.0);
        check_vs_cpu(&mut be, "transpose", &[dt], &[&[]], &[], 0.0);
        check_vs_cpu(
            &mut be,
            "slice",
            &[dt],
            &[&[7, 9, 5]],
            &[list(&[1.0, 0.0, 2.0]), list(&[3.0, 9.0, 3.0])],
            0.0,
        );
        check_vs_cpu(
            &mut be,
            "slice",
            &[dt],
            &[&[7, 9, 5]],
            &[
                list(&[1.0, 2.0, 0.0]),
                list(&[5.0, 7.0, 5.0]),
                dict(&[("strides", list(&[2.0, 3.0, 4.0]))]),
            ],
            0.0,
        );
        for axis in [0.0, 1.0, 2.0] {
            let mut b = GraphBuilder::new();
            let shapes: Vec<Vec<usize>> = (0..3)
                .map(|i| {
                    let mut s = vec![2, 3, 5];
                    s[axis as usize] = i + 1;
                    s
                })
                .collect();
            let ids: Vec<Val> = shapes
                .iter()
                .enumerate()
                .map(|(i, sh)| {
                    let id = b.input(&format!("in{i}"), desc(dt, sh)).unwrap();
                    operand(&b, id)
                })
                .collect();
            let out = b.call("concat", &[Val::List(ids), n(axis)]).unwrap()[0];
            let g = b.build(vec![("out".into(), out)]).unwrap();
            let node = &g.nodes[0];
            let inputs: Vec<Buf> = shapes
                .iter()
                .enumerate()
                .map(|(i, sh)| random_buf(dt, sh.iter().product(), 50 + i as u64))
                .collect();
            let in_descs: Vec<&OperandDescriptor> =
                node.inputs.iter().map(|&i| &g.operands[i]).collect();
            let out_descs = vec![g.operands[node.outputs[0]].clone()];
            let refs: Vec<&Buf> = inputs.iter().collect();
            let want =
                crate::backend::cpu::run_op(&node.op, &refs, &in_descs, &out_descs, None).unwrap();
            let got = run(&mut be, g, inputs).unwrap();
            assert_eq!(got[0], want[0], "concat axis {axis}");
        }
    }
}

#[test]
fn casts() {
    let Some(mut be) = backend() else { return };
    for from in [F, I, U] {
        for to in [F, I, U] {
            check_vs_cpu(&mut be, "cast", &[from], &[&[5, 67]], &[s(to.name())], 0.0);
        }
    }
    // Saturation and NaN from float32.
    let x = vec![f32::NAN, 3e9, -3e9, -0.7, 2.9, f32::INFINITY, -1.5, 4.3e9];
    for to in [I, U] {
        let g = op_graph("cast", F, &[&[8]], &[s(to.name())]).unwrap();
        let node = g.nodes[0].clone();
        let xin = Buf::F32(x.clone());
        let want = crate::backend::cpu::run_op(
            &node.op,
            &[&xin],
            &[&g.operands[node.inputs[0]]],
            &[g.operands[node.outputs[0]].clone()],
            None,
        )
        .unwrap();
        let got = run(&mut be, g, vec![xin]).unwrap();
        assert_eq!(got[0], want[0], "cast to {}", to.name());
    }
}

/// The six comparison operators, which several tests run alike.
const COMPARISONS: [&str; 6] = [
    "equal",
    "notEqual",
    "greater",
    "greaterOrEqual",
    "lesser",
    "lesserOrEqual",
];

/// Runs `g` on the GPU and on the CPU backend with the same inputs and
/// asserts the outputs are identical.
fn same_as_cpu(be: &mut GpuBackend, g: Graph, inputs: Vec<Buf>, what: &str) {
    let mut cpu = crate::backend::cpu::CpuBackend::new();
    let g = Arc::new(g);
    cpu.compile(1, g.clone()).unwrap();
    let want = cpu.compute(1, &g, inputs.clone()).unwrap();
    let got = run(be, (*g).clone(), inputs).unwrap();
    assert_eq!(got, want, "{what}");
}

/// A cast to a narrower type inside a graph (its result read by another
/// operator, not a graph output) holds values of that type: float16
/// rounded to the nearest half, small integers wrapped to their bits.
/// The GPU used to keep the wide value until an output packed it.
#[test]
fn casts_inside_a_graph_hold_values_of_the_target_type() {
    let Some(mut be) = backend() else { return };
    let floats = vec![
        1.0001, 65519.0, 65520.0, 1e-8, 3e-5, -2.0009766, 0.1, 1e6, -0.0, 2049.0,
    ];
    let ints = vec![300, -129, 128, 255, 256, -1, 70000, 7, -8, 9];
    for (from, to, data) in [
        (F, "float16", Buf::F32(floats.clone())),
        (I, "int8", Buf::I32(ints.clone())),
        (I, "uint8", Buf::I32(ints.clone())),
        (I, "int4", Buf::I32(ints.clone())),
        (I, "uint4", Buf::I32(ints.clone())),
        (
            U,
            "uint8",
            Buf::U32(ints.iter().map(|&v| v as u32).collect()),
        ),
    ] {
        let mut b = GraphBuilder::new();
        let x = b.input("x", desc(from, &[10])).unwrap();
        let narrow = b.call("cast", &[operand(&b, x), s(to)]).unwrap()[0];
        let back = b
            .call("cast", &[operand(&b, narrow), s(from.name())])
            .unwrap()[0];
        let g = b.build(vec![("y".into(), back)]).unwrap();
        same_as_cpu(
            &mut be,
            g,
            vec![data],
            &format!("{} -> {to} -> back", from.name()),
        );
    }
}

/// Comparisons with NaN operands: false, but notEqual true (IEEE 754),
/// whatever a shader compiler assumes about NaN.
#[test]
fn comparisons_of_nan_operands() {
    let Some(mut be) = backend() else { return };
    let a = vec![
        f32::NAN,
        f32::NAN,
        1.0,
        -f32::NAN,
        f32::INFINITY,
        2.0,
        0.0,
        -0.0,
    ];
    let b = vec![f32::NAN, 1.0, f32::NAN, 3.0, f32::NAN, 2.0, -0.0, 1.0];
    for name in COMPARISONS {
        for dt in [F, DataType::Float16] {
            let mut gb = GraphBuilder::new();
            let x = gb.input("a", desc(dt, &[8])).unwrap();
            let y = gb.input("b", desc(dt, &[8])).unwrap();
            let out = gb.call(name, &[operand(&gb, x), operand(&gb, y)]).unwrap()[0];
            let g = gb.build(vec![("out".into(), out)]).unwrap();
            let data = |v: &Vec<f32>| {
                if dt == F {
                    Buf::F32(v.clone())
                } else {
                    Buf::f16_from_f32(v)
                }
            };
            same_as_cpu(
                &mut be,
                g,
                vec![data(&a), data(&b)],
                &format!("{name} on {}", dt.name()),
            );
        }
    }
}

#[test]
fn gemm_options() {
    let Some(mut be) = backend() else { return };
    for (at, bt) in [(false, false), (true, false), (false, true), (true, true)] {
        let (m, k, nn) = (37usize, 19usize, 70usize);
        let sa = if at { [k, m] } else { [m, k] };
        let sb = if bt { [nn, k] } else { [k, nn] };
        let opts = dict(&[
            ("aTranspose", Val::Bool(at)),
            ("bTranspose", Val::Bool(bt)),
            ("alpha", n(0.75)),
        ]);
        check_vs_cpu(&mut be, "gemm", &[F, F], &[&sa, &sb], &[opts], 1e-4);
    }
    for sc in [&[37usize, 70][..], &[70], &[37, 1], &[1, 70], &[], &[1]] {
        let args = [Arg::T(F, &[37, 19]), Arg::T(F, &[19, 70])];
        let opts = [("c", Arg::T(F, sc)), ("beta", Arg::V(n(-1.5)))];
        check_call_vs_cpu(&mut be, "gemm", &args, Some(&opts), 1, 1e-4, 1e-4);
    }
}

#[test]
fn pool2d_options() {
    let Some(mut be) = backend() else { return };
    for name in ["averagePool2d", "maxPool2d", "l2Pool2d"] {
        for layout in ["nchw", "nhwc"] {
            let opts = [
                vec![],
                vec![("windowDimensions", list(&[3.0, 2.0]))],
                vec![
                    ("windowDimensions", list(&[3.0, 3.0])),
                    ("padding", list(&[1.0, 2.0, 2.0, 0.0])),
                    ("strides", list(&[2.0, 3.0])),
                    ("dilations", list(&[1.0, 2.0])),
                    ("roundingType", s("ceil")),
                ],
            ];
            for o in opts {
                let mut o = o;
                o.push(("layout", s(layout)));
                check_vs_cpu(&mut be, name, &[F], &[&[2, 3, 9, 11]], &[dict(&o)], 1e-5);
            }
        }
    }
}

/// maxPool2d takes any data type: the integer kernel against the CPU
/// backend, windows in the padding included.
#[test]
fn max_pool2d_every_type() {
    let Some(mut be) = backend() else { return };
    for dt in DataType::ALL {
        for layout in ["nchw", "nhwc"] {
            let o = [
                ("windowDimensions", list(&[3.0, 3.0])),
                ("padding", list(&[1.0, 3.0, 2.0, 0.0])),
                ("strides", list(&[2.0, 3.0])),
                ("outputShapeRounding", s("ceil")),
                ("layout", s(layout)),
            ];
            check_vs_cpu(
                &mut be,
                "maxPool2d",
                &[dt],
                &[&[2, 3, 7, 8]],
                &[dict(&o)],
                0.0,
            );
        }
    }
}

#[test]
fn logical_ops() {
    let Some(mut be) = backend() else { return };
    let u8t = DataType::Uint8;
    let shapes: &[(&[usize], &[usize])] = &[(&[7, 9], &[9]), (&[3, 1, 5], &[1, 4, 1]), (&[], &[])];
    for name in COMPARISONS {
        for dt in [F, I, U, u8t] {
            for (sa, sb) in shapes {
                check_vs_cpu(&mut be, name, &[dt, dt], &[sa, sb], &[], 0.0);
            }
        }
    }
    for name in ["logicalAnd", "logicalOr", "logicalXor"] {
        for (sa, sb) in shapes {
            check_vs_cpu(&mut be, name, &[u8t, u8t], &[sa, sb], &[], 0.0);
        }
    }
    check_vs_cpu(&mut be, "logicalNot", &[u8t], &[&[13]], &[], 0.0);
    let x = vec![
        f32::NAN,
        f32::INFINITY,
        -f32::INFINITY,
        0.0,
        1.0,
        -f32::NAN,
        3.0,
    ];
    for name in ["isNaN", "isInfinite"] {
        let g = op_graph(name, F, &[&[7]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::F32(x.clone())]).unwrap();
        let want: Vec<u8> = x
            .iter()
            .map(|v| {
                u8::from(if name == "isNaN" {
                    v.is_nan()
                } else {
                    v.is_infinite()
                })
            })
            .collect();
        assert_eq!(out[0], Buf::U8(want), "{name}");
    }
}

#[test]
fn where_and_prelu() {
    let Some(mut be) = backend() else { return };
    for dt in [F, I, U, DataType::Uint8] {
        check_vs_cpu(
            &mut be,
            "where",
            &[DataType::Uint8, dt, dt],
            &[&[2, 1, 5], &[3, 1], &[5]],
            &[],
            0.0,
        );
        check_vs_cpu(
            &mut be,
            "where",
            &[DataType::Uint8, dt, dt],
            &[&[7], &[7], &[7]],
            &[],
            0.0,
        );
    }
    for dt in [F, I] {
        check_vs_cpu(
            &mut be,
            "prelu",
            &[dt, dt],
            &[&[3, 4, 5], &[4, 1]],
            &[],
            0.0,
        );
        check_vs_cpu(&mut be, "prelu", &[dt, dt], &[&[301], &[1]], &[], 0.0);
    }
}

#[test]
fn float_activations() {
    let Some(mut be) = backend() else { return };
    let ab = dict(&[("alpha", n(0.3)), ("beta", n(-0.2))]);
    let a = dict(&[("alpha", n(0.7))]);
    for (name, opts) in [
        ("elu", vec![]),
        ("elu", vec![a.clone()]),
        ("gelu", vec![]),
        ("hardSigmoid", vec![]),
        ("hardSigmoid", vec![ab.clone()]),
        ("hardSwish", vec![]),
        ("leakyRelu", vec![]),
        ("leakyRelu", vec![a.clone()]),
        ("linear", vec![]),
        ("linear", vec![ab.clone()]),
        ("softplus", vec![]),
        ("softsign", vec![]),
    ] {
        check_vs_cpu(&mut be, name, &[F], &[&[3, 97]], &opts, 1e-5);
    }
}

#[test]
fn reductions() {
    let Some(mut be) = backend() else { return };
    let all = [
        "reduceSum",
        "reduceL1",
        "reduceSumSquare",
        "reduceProduct",
        "reduceMax",
        "reduceMin",
        "reduceMean",
        "reduceL2",
        "reduceLogSum",
        "reduceLogSumExp",
    ];
    let axes_cases: Vec<Vec<(&str, Val)>> = vec![
        vec![],
        vec![("axes", list(&[1.0]))],
        vec![
            ("axes", list(&[0.0, 2.0])),
            ("keepDimensions", Val::Bool(true)),
        ],
        vec![("axes", list(&[]))],
        vec![("axes", list(&[2.0]))],
    ];
    for name in all {
        let types: &[DataType] = if all[..6].contains(&name) {
            &[F, I, U]
        } else {
            &[F]
        };
        for &dt in types {
            for o in &axes_cases {
                // Products and logs need tame inputs: [0.5, 1.5) and [1, 2) below.
                let shape = [3usize, 5, 7];
                let mut b = GraphBuilder::new();
                let x = b.input("x", desc(dt, &shape)).unwrap();
                let out = b.call(name, &[operand(&b, x), dict(o)]).unwrap()[0];
                let g = b.build(vec![("out".into(), out)]).unwrap();
                let node = g.nodes[0].clone();
                let xin = match random_buf(dt, 105, 9) {
                    Buf::F32(v) => Buf::F32(v.iter().map(|x| x.abs() / 2.0 + 0.5).collect()),
                    Buf::I32(v) if name == "reduceProduct" => {
                        Buf::I32(v.iter().map(|x| x % 3).collect())
                    }
                    other => other,
                };
                let want = crate::backend::cpu::run_op(
                    &node.op,
                    &[&xin],
                    &[&g.operands[x]],
                    &[g.operands[node.outputs[0]].clone()],
                    None,
                )
                .unwrap();
                let got = run(&mut be, g, vec![xin]).unwrap();
                let what = format!("{name} {} {o:?}", dt.name());
                match (&got[0], &want[0]) {
                    (Buf::F32(g), Buf::F32(w)) => assert_close(g, w, 1e-5, &what),
                    (g, w) => assert_eq!(g, w, "{what}"),
                }
            }
        }
    }
}

#[test]
fn takes_every_cpu_type_and_refuses_only_oversized_tensors() {
    // The GPU takes every operator with every data type the CPU takes
    // (the registry's, which the CPU context's opSupportLimits()
    // lists), so what it refuses is size: here an int64 intermediate
    // of [n, n] larger than one storage binding, from small inputs.
    for def in crate::graph::ops::all() {
        for l in def.operands {
            for &t in l.types {
                assert!(
                    supports(def.name, l.name, t),
                    "{}.{} on {}",
                    def.name,
                    l.name,
                    t.name()
                );
            }
        }
    }
    let Some(mut be) = backend() else { return };
    let max = be.max_tensor_byte_length();
    let n = ((max / 8) as f64).sqrt() as usize + 1;
    let i = DataType::Int64;
    let mut b = GraphBuilder::new();
    let col = b.input("col", desc(i, &[n, 1])).unwrap();
    let row = b.input("row", desc(i, &[1, n])).unwrap();
    let product = b
        .call("mul", &[operand(&b, col), operand(&b, row)])
        .unwrap()[0];
    let y = b.call("reduceMax", &[operand(&b, product)]).unwrap()[0];
    let g = b.build(vec![("y".into(), y)]).unwrap();
    let e = be.compile(2, Arc::new(g)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Operation);
    // The smaller of the two limits is the one a tensor meets first.
    let bytes = 8 * n * n;
    let want = if max as u64 == be.gpu.limits.max_buffer_size {
        format!("intermediate: {bytes} bytes exceed the GPU's largest buffer ({max} bytes)")
    } else {
        format!("a tensor of {bytes} bytes exceeds the GPU's largest storage binding ({max} bytes)")
    };
    assert_eq!(e.message, want);
}

/// Graphs over the same constant bytes share one device buffer of each
/// (int8 ones widened once), run in any order with their own results,
/// and the buffer goes when the last graph holding it does.
#[test]
fn graphs_share_their_constants() {
    use crate::backend::cpu::CpuBackend;
    use crate::backend::testing::constant;
    let Some(mut be) = backend() else { return };
    let graph = |scale: f64| {
        let mut b = GraphBuilder::new();
        let a = b.input("a", desc(DataType::Float32, &[3, 8])).unwrap();
        let w = constant(&mut b, DataType::Float32, &[8, 5], &[0.25; 40]);
        let q: Vec<f64> = (0..5).map(|i| i as f64 - 2.0).collect();
        let c = constant(&mut b, DataType::Int8, &[5], &q);
        let s = constant(&mut b, DataType::Float32, &[5], &[scale; 5]);
        let z = constant(&mut b, DataType::Int8, &[5], &[0.0; 5]);
        let bias = b
            .call(
                "dequantizeLinear",
                &[operand(&b, c), operand(&b, s), operand(&b, z)],
            )
            .unwrap()[0];
        let p = b.call("matmul", &[operand(&b, a), operand(&b, w)]).unwrap()[0];
        let out = b.call("add", &[operand(&b, p), operand(&b, bias)]).unwrap()[0];
        b.build(vec![("out".into(), out)]).unwrap()
    };
    let g = Arc::new(graph(0.5));
    // The same graph, but for one constant's bytes: a copy, scaled.
    let mut other = graph(0.5);
    let at = (0..other.operands.len())
        .find(|&i| {
            other.operands[i].shape == [5] && other.operands[i].data_type == DataType::Float32
        })
        .unwrap();
    let scaled: Vec<u8> = [3.0f32; 5].iter().flat_map(|v| v.to_le_bytes()).collect();
    // Every other constant of `other` takes `g`'s bytes.
    for i in 0..other.operands.len() {
        if let (Source::Constant(_), Source::Constant(mine)) =
            (&g.sources[i], &mut other.sources[i])
        {
            *mine = match i == at {
                true => Arc::new(scaled.clone()),
                false => g.constant(i).unwrap().clone(),
            };
        }
    }
    let other = Arc::new(other);
    be.compile(1, g.clone()).unwrap();
    be.compile(2, g.clone()).unwrap();
    be.compile(3, other.clone()).unwrap();
    let ptr = |be: &GpuBackend, id| {
        let mut v: Vec<usize> = be.graphs[&id]
            .constants
            .iter()
            .map(|b| Arc::as_ptr(b) as usize)
            .collect();
        v.sort();
        v
    };
    assert_eq!(ptr(&be, 1).len(), 4);
    assert_eq!(ptr(&be, 1), ptr(&be, 2));
    let common = ptr(&be, 1)
        .iter()
        .filter(|p| ptr(&be, 3).contains(p))
        .count();
    assert_eq!(common, 3, "all but the scaled constant");
    let x = vec![Buf::F32(random(24, 3))];
    let mut cpu = CpuBackend::new();
    for (id, graph) in [(3, &other), (1, &g), (2, &g), (3, &other)] {
        let got = be.compute(id, graph, x.clone()).unwrap();
        cpu.compile(id, graph.clone()).unwrap();
        let want = cpu.compute(id, graph, x.clone()).unwrap();
        assert_close(
            &f32s(&got[0]),
            &f32s(&want[0]),
            1e-6,
            &format!("graph {id}"),
        );
    }
    let weak = Arc::downgrade(&be.graphs[&1].constants[0]);
    be.destroy_graph(1);
    assert!(weak.upgrade().is_some(), "graph 2 holds it");
    be.destroy_graph(2);
    be.destroy_graph(3);
    assert!(weak.upgrade().is_none());
}
